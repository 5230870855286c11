"""The explorer: the market's state joined with the chain, as server-rendered pages and JSON.

`routes.mount(app)` serves it; `queries` reads each page's data (transactions as the chain
index decoded them when their block arrived); `format` writes integers (lovelace, ms) for people.
"""
