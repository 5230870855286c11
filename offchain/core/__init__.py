"""What every layer shares and that imports nothing of ours: the error root and the settings every
process reads.
"""
