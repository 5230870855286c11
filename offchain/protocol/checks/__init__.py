"""What a party checks before it signs or relies on a UTxO: acceptance, escrow, bond and cancel
checks.
"""
