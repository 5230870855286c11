"""The explorer: the market's state joined with the chain, as server-rendered pages and JSON.

`routes.mount(app)` serves it; `decode` turns transactions into what pages show; `queries`
reads each page's data; `format` writes integers (lovelace, ms) for people.
"""
