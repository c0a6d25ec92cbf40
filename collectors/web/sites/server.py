"""Small but real multi-page web applications for web episodes, served on 127.0.0.1.

Three sites under one local HTTP server (standard library, threads), each at its prefix:

- ``/shop/``: product search, product pages, a cart, a checkout form that places an order;
- ``/wiki/``: search, article pages, editing an article (with an edit summary);
- ``/tracker/``: login, a list of issues, creating and closing issues.

Server-side state lives in one SQLite file per episode: ``reset()`` starts a fresh one
from the sites' seed data, so no episode sees another's orders, edits or issues. Task
checks read that state with SQL (``query``). Pages are plain server-rendered HTML with
forms and links (no scripts needed), plus ``/slow/`` (a page whose script keeps changing
the DOM, so it never settles) for the bounded-wait test.
"""

from __future__ import annotations

import html
import sqlite3
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

SEED = """
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price REAL, description TEXT);
CREATE TABLE cart (product_id INTEGER PRIMARY KEY, qty INTEGER);
CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT, address TEXT, shipping TEXT, items TEXT, total REAL);
CREATE TABLE articles (slug TEXT PRIMARY KEY, title TEXT, body TEXT);
CREATE TABLE edits (id INTEGER PRIMARY KEY, slug TEXT, summary TEXT);
CREATE TABLE users (name TEXT PRIMARY KEY, password TEXT);
CREATE TABLE sessions (token TEXT PRIMARY KEY, user TEXT);
CREATE TABLE issues (id INTEGER PRIMARY KEY, title TEXT, body TEXT, status TEXT, author TEXT);
INSERT INTO products (name, price, description) VALUES
  ('Blue Kettle', 24.5, 'A 1.7 litre kettle in blue steel.'),
  ('Red Kettle', 26.0, 'A 1.7 litre kettle in red enamel.'),
  ('Espresso Cups', 12.0, 'Four porcelain cups.'),
  ('Tea Towel', 6.5, 'Linen, striped.'),
  ('French Press', 31.0, 'One litre, glass and steel.');
INSERT INTO articles VALUES
  ('python', 'Python', 'Python is a programming language created by Guido van Rossum.'),
  ('kettle', 'Kettle', 'A kettle is a vessel for boiling water.'),
  ('sqlite', 'SQLite', 'SQLite is an embedded SQL database engine.');
INSERT INTO users VALUES ('alice', 'wonderland'), ('bob', 'builder');
INSERT INTO issues (title, body, status, author) VALUES
  ('Login page is slow', 'Takes 5 s to load.', 'open', 'bob'),
  ('Typo on home page', 'Teh -> The', 'open', 'alice');
"""

_STYLE = "body{font-family:sans-serif;max-width:720px;margin:1em auto} nav a{margin-right:1em}"


def _page(title: str, site: str, body: str, nav: list[tuple[str, str]]) -> bytes:
    links = "".join(f'<a href="{h}" data-bid="nav-{t.lower().replace(" ", "-")}">{html.escape(t)}</a>' for t, h in nav)
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f'</head><body><nav aria-label="{site}">{links}</nav><main>{body}</main></body></html>'
    ).encode()


class SiteState:
    """One episode's database (a fresh SQLite file per reset)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="trajforge-web-")
        self.lock = threading.Lock()
        self.generation = 0
        self.db: sqlite3.Connection | None = None
        self.reset()

    def reset(self) -> None:
        with self.lock:
            if self.db is not None:
                self.db.close()
            self.generation += 1
            path = Path(self.dir, f"episode-{self.generation}.sqlite")
            path.unlink(missing_ok=True)
            Path(self.dir, f"episode-{self.generation - 1}.sqlite").unlink(missing_ok=True)
            self.db = sqlite3.connect(path, check_same_thread=False)
            self.db.executescript(SEED)
            self.db.commit()

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def write(self, sql: str, args: tuple = ()) -> int:
        with self.lock:
            cur = self.db.execute(sql, args)
            self.db.commit()
            return cur.lastrowid

    def close(self) -> None:
        import shutil

        with self.lock:
            if self.db is not None:
                self.db.close()
                self.db = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _shop(h: Handler, path: str, q: dict[str, str]) -> bytes:
    s, nav = h.server.state, [("Home", "/shop/"), ("Cart", "/shop/cart"), ("Checkout", "/shop/checkout")]
    if path == "/shop/":
        term = q.get("q", "")
        rows = s.query("SELECT id, name, price FROM products WHERE name LIKE ? ORDER BY id", (f"%{term}%",))
        items = "".join(
            f'<li><a href="/shop/product/{i}" data-bid="product-{i}">{html.escape(n)}</a> ${p:.2f}</li>' for i, n, p in rows
        )
        form = (
            f'<form action="/shop/" method="get" role="search"><input name="q" type="search" aria-label="Search products" '
            f'value="{html.escape(term)}" data-bid="search"><button data-bid="search-go">Search</button></form>'
        )
        found = f"<p>{len(rows)} products</p><ul>{items}</ul>" if rows else "<p>No products match.</p>"
        return _page("Shop", "shop", f"<h1>Shop</h1>{form}{found}", nav)
    if path.startswith("/shop/product/"):
        row = s.query("SELECT id, name, price, description FROM products WHERE id = ?", (path.rsplit("/", 1)[1],))
        if not row:
            return h.not_found()
        i, n, p, d = row[0]
        form = (
            f'<form action="/shop/cart/add" method="post"><input type="hidden" name="id" value="{i}">'
            f'<label>Quantity <input name="qty" type="number" value="1" min="1" data-bid="qty"></label>'
            f'<button data-bid="add-to-cart">Add to cart</button></form>'
        )
        maker = '<p><a href="https://example.org/kettles" data-bid="maker">Maker\'s site</a></p>'  # outside: blocked
        return _page(n, "shop", f"<h1>{html.escape(n)}</h1><p>${p:.2f}</p><p>{html.escape(d)}</p>{form}{maker}", nav)
    if path == "/shop/cart/add" and h.command == "POST":
        s.write(
            "INSERT INTO cart VALUES (?, ?) ON CONFLICT(product_id) DO UPDATE SET qty = qty + excluded.qty",
            (int(q["id"]), max(1, int(q.get("qty") or 1))),
        )
        return h.redirect("/shop/cart")
    if path == "/shop/cart":
        rows = s.query("SELECT p.name, c.qty, p.price * c.qty FROM cart c JOIN products p ON p.id = c.product_id ORDER BY p.id")
        body = "".join(f"<tr><td>{html.escape(n)}</td><td>{k}</td><td>${t:.2f}</td></tr>" for n, k, t in rows)
        table = (
            f"<table><tr><th>Product</th><th>Qty</th><th>Total</th></tr>{body}</table>" if rows else "<p>Your cart is empty.</p>"
        )
        return _page("Cart", "shop", f"<h1>Cart</h1>{table}", nav)
    if path == "/shop/checkout" and h.command == "GET":
        form = (
            '<form action="/shop/checkout" method="post"><label>Name <input name="name" data-bid="name"></label>'
            '<label>Address <input name="address" data-bid="address"></label>'
            '<label>Shipping <select name="shipping" data-bid="shipping"><option>standard</option><option>express</option>'
            '</select></label><button data-bid="place-order">Place order</button></form>'
        )
        return _page("Checkout", "shop", f"<h1>Checkout</h1>{form}", nav)
    if path == "/shop/checkout" and h.command == "POST":
        rows = s.query("SELECT p.name, c.qty, p.price * c.qty FROM cart c JOIN products p ON p.id = c.product_id")
        if not rows or not q.get("name") or not q.get("address"):
            return _page(
                "Checkout", "shop", '<h1>Checkout</h1><p role="alert">Name, address and a full cart are needed.</p>', nav
            )
        items = ", ".join(f"{n} x{k}" for n, k, _ in rows)
        oid = s.write(
            "INSERT INTO orders (name, address, shipping, items, total) VALUES (?, ?, ?, ?, ?)",
            (q["name"], q["address"], q.get("shipping", "standard"), items, sum(t for *_, t in rows)),
        )
        s.write("DELETE FROM cart")
        return _page("Order placed", "shop", f"<h1>Thank you</h1><p>Order #{oid} placed: {html.escape(items)}.</p>", nav)
    return h.not_found()


def _wiki(h: Handler, path: str, q: dict[str, str]) -> bytes:
    s, nav = h.server.state, [("Main page", "/wiki/"), ("Search", "/wiki/search")]
    if path == "/wiki/":
        rows = s.query("SELECT slug, title FROM articles ORDER BY title")
        items = "".join(f'<li><a href="/wiki/page/{sl}" data-bid="article-{sl}">{html.escape(t)}</a></li>' for sl, t in rows)
        return _page("Wiki", "wiki", f"<h1>Wiki</h1><ul>{items}</ul>", nav)
    if path == "/wiki/search":
        term = q.get("q", "")
        form = (
            f'<form role="search"><input name="q" type="search" aria-label="Search the wiki" value="{html.escape(term)}" '
            f'data-bid="search"><button data-bid="search-go">Search</button></form>'
        )
        rows = s.query("SELECT slug, title FROM articles WHERE title LIKE ? OR body LIKE ?", (f"%{term}%",) * 2) if term else []
        hits = "".join(f'<li><a href="/wiki/page/{sl}" data-bid="hit-{sl}">{html.escape(t)}</a></li>' for sl, t in rows)
        return _page("Search", "wiki", f"<h1>Search</h1>{form}<ul>{hits}</ul>", nav)
    if path.startswith("/wiki/page/"):
        row = s.query("SELECT slug, title, body FROM articles WHERE slug = ?", (path.rsplit("/", 1)[1],))
        if not row:
            return h.not_found()
        sl, t, b = row[0]
        edit = f'<a href="/wiki/edit/{sl}" data-bid="edit">Edit</a>'
        return _page(t, "wiki", f"<h1>{html.escape(t)}</h1><p>{html.escape(b)}</p>{edit}", nav)
    if path.startswith("/wiki/edit/"):
        sl = path.rsplit("/", 1)[1]
        row = s.query("SELECT title, body FROM articles WHERE slug = ?", (sl,))
        if not row:
            return h.not_found()
        if h.command == "POST":
            s.write("UPDATE articles SET body = ? WHERE slug = ?", (q.get("body", ""), sl))
            s.write("INSERT INTO edits (slug, summary) VALUES (?, ?)", (sl, q.get("summary", "")))
            return h.redirect(f"/wiki/page/{sl}")
        t, b = row[0]
        form = (
            f'<form method="post"><label>Text <textarea name="body" data-bid="body">{html.escape(b)}</textarea></label>'
            f'<label>Summary <input name="summary" data-bid="summary"></label>'
            f'<button data-bid="save">Save</button></form>'
        )
        return _page(f"Editing {t}", "wiki", f"<h1>Editing {html.escape(t)}</h1>{form}", nav)
    return h.not_found()


def _tracker(h: Handler, path: str, q: dict[str, str]) -> bytes:
    s = h.server.state
    token = h.cookie("session")
    user = next(iter(s.query("SELECT user FROM sessions WHERE token = ?", (token,))), (None,))[0] if token else None
    nav = [("Issues", "/tracker/"), ("New issue", "/tracker/new")] + ([("Log out", "/tracker/logout")] if user else [])
    if path == "/tracker/login":
        if h.command == "POST":
            ok = s.query("SELECT 1 FROM users WHERE name = ? AND password = ?", (q.get("user", ""), q.get("password", "")))
            if ok:
                import secrets

                tok = secrets.token_hex(8)
                s.write("INSERT INTO sessions VALUES (?, ?)", (tok, q["user"]))
                return h.redirect("/tracker/", cookie=f"session={tok}; Path=/tracker")
            error = '<p role="alert">Wrong user name or password.</p>'
        else:
            error = ""
        form = (
            '<form method="post"><label>User <input name="user" data-bid="user"></label>'
            '<label>Password <input name="password" type="password" data-bid="password"></label>'
            '<button data-bid="login">Log in</button></form>'
        )
        return _page("Log in", "tracker", f"<h1>Log in</h1>{error}{form}", nav)
    if path == "/tracker/logout":
        return h.redirect("/tracker/login", cookie="session=; Path=/tracker; Max-Age=0")
    if not user:
        return h.redirect("/tracker/login")
    if path == "/tracker/":
        rows = s.query("SELECT id, title, status, author FROM issues ORDER BY id")
        items = "".join(
            f'<li><a href="/tracker/issue/{i}" data-bid="issue-{i}">#{i} {html.escape(t)}</a> ({st}, by {a})</li>'
            for i, t, st, a in rows
        )
        return _page("Issues", "tracker", f"<h1>Issues</h1><p>Logged in as {user}</p><ul>{items}</ul>", nav)
    if path == "/tracker/new":
        if h.command == "POST":
            if not q.get("title"):
                return _page("New issue", "tracker", '<p role="alert">A title is needed.</p>', nav)
            i = s.write(
                "INSERT INTO issues (title, body, status, author) VALUES (?, ?, 'open', ?)", (q["title"], q.get("body", ""), user)
            )
            return h.redirect(f"/tracker/issue/{i}")
        form = (
            '<form method="post"><label>Title <input name="title" data-bid="title"></label>'
            '<label>Description <textarea name="body" data-bid="body"></textarea></label>'
            '<button data-bid="create">Create issue</button></form>'
        )
        return _page("New issue", "tracker", f"<h1>New issue</h1>{form}", nav)
    if path.startswith("/tracker/issue/"):
        parts = path.split("/")
        row = s.query("SELECT id, title, body, status, author FROM issues WHERE id = ?", (parts[3],))
        if not row:
            return h.not_found()
        i, t, b, st, a = row[0]
        if len(parts) > 4 and parts[4] == "close" and h.command == "POST":
            s.write("UPDATE issues SET status = 'closed' WHERE id = ?", (i,))
            return h.redirect(f"/tracker/issue/{i}")
        close = (
            ""
            if st == "closed"
            else f'<form method="post" action="/tracker/issue/{i}/close">'
            '<button data-bid="close-issue">Close issue</button></form>'
        )
        return _page(
            f"#{i} {t}",
            "tracker",
            f"<h1>#{i} {html.escape(t)}</h1><p>Status: {st}, by {a}</p><p>{html.escape(b)}</p>{close}",
            nav,
        )
    return h.not_found()


_SLOW = (
    "<!doctype html><title>Busy</title><h1>Busy page</h1><p id=t>0</p>"
    "<script>let n=0;setInterval(()=>{document.getElementById('t').textContent=++n},50)</script>"
)
_INDEX = _page(
    "Sites",
    "sites",
    '<h1>Sites</h1><ul><li><a href="/shop/">Shop</a></li><li><a href="/wiki/">Wiki</a></li>'
    '<li><a href="/tracker/">Tracker</a></li></ul>',
    [],
)


class Handler(BaseHTTPRequestHandler):
    server: SiteServer

    def _handle(self) -> None:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if self.command == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            q.update({k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode(), keep_blank_values=True).items()})
        self._status, self._headers = 200, {}
        path = url.path
        try:
            if path == "/":
                body = _INDEX
            elif path == "/slow/":
                body = _SLOW.encode()
            else:
                site = {"shop": _shop, "wiki": _wiki, "tracker": _tracker}.get(path.strip("/").split("/")[0])
                body = site(self, path, q) if site else self.not_found()
        except (KeyError, ValueError):
            self._status, body = 400, b"<!doctype html><title>Bad request</title><h1>Bad request</h1>"
        self.send_response(self._status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in self._headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = _handle

    def redirect(self, to: str, cookie: str | None = None) -> bytes:
        self._status = 303
        self._headers["Location"] = quote(to, safe="/?=&")
        if cookie:
            self._headers["Set-Cookie"] = cookie
        return b""

    def not_found(self) -> bytes:
        self._status = 404
        return b"<!doctype html><title>Not found</title><h1>Not found</h1>"

    def cookie(self, name: str) -> str | None:
        for part in (self.headers.get("Cookie") or "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == name and v:
                return v
        return None

    def log_message(self, *args: Any) -> None:
        pass


class SiteServer(ThreadingHTTPServer):
    """``SiteServer().start()``; ``.url`` is its origin; ``.state`` the episode's database."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = SiteState()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> SiteServer:
        threading.Thread(target=self.serve_forever, daemon=True, name="trajforge-sites").start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.state.close()
