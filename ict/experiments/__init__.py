"""Experiments that wire training and evaluation together: `ict compare` (methods x seeds,
trained and evaluated alike, then `ict.analysis`'s report). Imports every layer below the
command line but the integrations."""
