"""Looking at runs: the pre-registered comparison and its report, curves, and the token view of
which tokens each selector picks. Imports every layer below the command line."""
