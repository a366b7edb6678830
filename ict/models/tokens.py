"""The texts of a tokenizer's tokens as a reader sees them (ict inspect's page, the trainer's
top-token lists)."""

from __future__ import annotations

from typing import Any


def token_strings(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's text: decoded after the token before it, less that token's text, so that the
    texts put together are ``tokenizer.decode(ids)`` (decoded alone, a token lost its leading space
    under a SentencePiece decoder, as Llama's and Mistral's, which drops a decode's first space:
    'the sum' showed as 'thesum'; a token that changes the text before it, decoded alone); a
    character whose bytes span several tokens (decoding one alone gives U+FFFD, e.g. a CJK
    character in a byte-level vocabulary) shows whole on its last token, its earlier tokens as ''."""
    strings: list[str] = []
    context = start = 0  # ids[context:start]: the token (or the bytes of a character) before
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[context:end])
        if text.endswith("\ufffd") and end < len(ids):  # an incomplete character: wait for its next byte
            strings.append("")
            continue
        before = tokenizer.decode(ids[context:start])
        strings.append(text[len(before):] if text.startswith(before) else tokenizer.decode(ids[start:end]))
        context, start = start, end
    return strings


def token_text(tokenizer: Any, token: int) -> str:
    """A token id's string in the top-token lists (the trainer's and ict inspect's; the id as text
    without a tokenizer): its text
    decoded after itself (`token_strings` of ``[token, token]``, as ict
    inspect shows it after the token before it): decoded alone, a SentencePiece decoder (Llama's,
    Mistral's) drops a word-start space, so ``'▁the'`` and ``'the'`` both read 'the' and the run
    summary and ict compare, which add the counts up by string, summed them as one. A token holding
    part of a character's bytes decodes alone to U+FFFD, the same for every such token (SmolLM2's
    first byte tokens of ' 😀', ' 日' and ' Ω' are all ' \ufffd'), so its string (decoded alone)
    also names its id, ``' \ufffd (id 40303)'``."""
    if tokenizer is None:
        return str(token)
    text = tokenizer.decode([token])
    return f"{text} (id {token})" if "\ufffd" in text else token_strings(tokenizer, [token, token])[1]
