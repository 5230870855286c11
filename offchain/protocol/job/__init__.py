"""A job as every party sees it: spec, offer, receipt, metering record, outcome, state, GPU slices,
image references.
"""
