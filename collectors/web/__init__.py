"""The web domain: Playwright on Chromium (``env``), its actions (``actions``), the page as
an accessibility tree with bids (``page``) and the shipped sites (``sites``)."""
