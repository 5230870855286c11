"""The one root of Unchained's own errors, as pycardano has `PyCardanoException`: a CLI turns
any of them into a message and the market's API into one 4xx answer, in one place each."""


class UnchainedError(Exception):
    """Something Unchained refused or could not do; the message says what and what to do."""
