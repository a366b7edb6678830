"""The method's math and the plain types every layer shares.

Token statistics, selectors and their registry, the policy loss, pass@k, diagnostics and
significance tests are pure functions on tensors; `errors`, `problems` (the one problem type),
`options` and `profiling` are the plain types and helpers beside them. Imports nothing of ict
outside this package: no models, files or command line.
"""
