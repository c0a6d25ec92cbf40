"""A bank and shop account: balances, transfers, a product catalogue, a cart and checkout.

Seeded with two or three accounts and a small catalogue with stock; transfers and
purchases move money and stock, so a later balance or checkout depends on earlier calls
(insufficient funds, out of stock)."""

from __future__ import annotations

import random
from decimal import Decimal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from collectors.mcp.stubs import Clock, serve

PRODUCTS = [
    ("p1", "USB-C cable", "electronics", "9.99"),
    ("p2", "Mechanical keyboard", "electronics", "89.00"),
    ("p3", "Coffee beans 1kg", "grocery", "21.50"),
    ("p4", "Desk lamp", "home", "34.90"),
    ("p5", "Notebook A5", "office", "4.20"),
    ("p6", "Noise-cancelling headphones", "electronics", "199.00"),
]


def build(seed: int) -> MCPServer:
    rng = random.Random(seed)
    clock = Clock(rng)
    accounts = {"checking": Decimal(rng.randint(50, 900)), "savings": Decimal(rng.randint(500, 5000))}
    history: list[dict] = []
    stock = {pid: rng.randint(0, 5) for pid, *_ in PRODUCTS}
    catalogue = {pid: {"id": pid, "name": n, "category": c, "price": Decimal(p)} for pid, n, c, p in PRODUCTS}
    cart: dict[str, int] = {}
    server = MCPServer("stub-bank", version="1.0", instructions="A bank account and an online shop.", log_level="WARNING")

    def account(name: str) -> Decimal:
        if name not in accounts:
            raise ToolError(f"unknown account '{name}' (accounts: {', '.join(accounts)})")
        return accounts[name]

    def amount_of(text: str) -> Decimal:
        try:
            value = Decimal(text)
        except ArithmeticError:
            raise ToolError(f"invalid amount '{text}'") from None
        if value <= 0 or value != value.quantize(Decimal("0.01")):
            raise ToolError(f"amount must be positive with at most 2 decimals, got {text}")
        return value

    @server.tool()
    def list_accounts() -> list[dict]:
        """Accounts and their balances."""
        return [{"account": k, "balance": f"{v:.2f}"} for k, v in accounts.items()]

    @server.tool()
    def transfer(from_account: str, to_account: str, amount: str, memo: str = "") -> dict:
        """Move an amount (e.g. "25.00") between two accounts."""
        value, source = amount_of(amount), account(from_account)
        account(to_account)
        if from_account == to_account:
            raise ToolError("source and destination accounts are the same")
        if source < value:
            raise ToolError(f"insufficient funds: {from_account} has {source:.2f}, needs {value:.2f}")
        accounts[from_account] -= value
        accounts[to_account] += value
        history.append(
            {
                "id": f"t{len(history) + 1}",
                "date": clock.tick(),
                "from": from_account,
                "to": to_account,
                "amount": f"{value:.2f}",
                "memo": memo,
            }
        )
        return {**history[-1], "balance_after": f"{accounts[from_account]:.2f}"}

    @server.tool()
    def list_transactions(account_name: str, limit: int = 10) -> list[dict]:
        """The latest transactions touching an account."""
        account(account_name)
        return [t for t in reversed(history) if account_name in (t["from"], t["to"])][:limit]

    @server.tool()
    def list_products(category: str | None = None) -> list[dict]:
        """The shop's products with price and stock, optionally of one category."""
        known = sorted({p["category"] for p in catalogue.values()})
        if category is not None and category not in known:
            raise ToolError(f"unknown category '{category}' (categories: {', '.join(known)})")
        return [
            {**{k: str(v) for k, v in p.items()}, "in_stock": stock[p["id"]]}
            for p in catalogue.values()
            if category in (None, p["category"])
        ]

    @server.tool()
    def add_to_cart(product_id: str, quantity: int = 1) -> dict:
        """Put a quantity of a product in the cart."""
        if product_id not in catalogue:
            raise ToolError(f"product '{product_id}' not found")
        if quantity < 1:
            raise ToolError("quantity must be at least 1")
        if cart.get(product_id, 0) + quantity > stock[product_id]:
            raise ToolError(f"only {stock[product_id]} of '{catalogue[product_id]['name']}' in stock")
        cart[product_id] = cart.get(product_id, 0) + quantity
        return view_cart()

    @server.tool()
    def view_cart() -> dict:
        """The cart's lines and total."""
        lines = [
            {"product_id": p, "name": catalogue[p]["name"], "quantity": q, "subtotal": f"{catalogue[p]['price'] * q:.2f}"}
            for p, q in sorted(cart.items())
        ]
        return {"lines": lines, "total": f"{sum(catalogue[p]['price'] * q for p, q in cart.items()):.2f}"}

    @server.tool()
    def checkout(pay_from: str) -> dict:
        """Pay for the cart from an account; empties the cart."""
        if not cart:
            raise ToolError("the cart is empty")
        total = sum(catalogue[p]["price"] * q for p, q in cart.items())
        if account(pay_from) < total:
            raise ToolError(f"payment declined: insufficient funds in {pay_from} ({accounts[pay_from]:.2f} < {total:.2f})")
        accounts[pay_from] -= total
        for p, q in cart.items():
            stock[p] -= q
        order = {"order_id": f"o{len(history) + 1}", "total": f"{total:.2f}", "items": sum(cart.values()), "date": clock.tick()}
        history.append(
            {
                "id": order["order_id"],
                "date": order["date"],
                "from": pay_from,
                "to": "shop",
                "amount": order["total"],
                "memo": "shop order",
            }
        )
        cart.clear()
        return order

    return server


if __name__ == "__main__":
    serve(build)
