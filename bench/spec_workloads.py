"""The texts bench/bench_speculative.py sends: editing workloads of different shapes (each reply copies its prompt
in a different way), code completion and free text. Each is one raw ChatML prompt (or a raw completion prompt),
so Strata and llama-server decode the same tokens.

- rename      rename a function through a ~60-line module and print it whole (the reply copies the module with a
              name changed in five places)
- hints       add type hints to every function of a module and print it whole (copies, inserting `: float` and
              `-> str` into every signature)
- json        reformat a minified JSON document with 2-space indentation (the reply copies keys and values, but
              every line's whitespace is new)
- write       an agent's Write tool: the file rewritten with one function changed, as a tool call whose `content`
              is a JSON string (every newline and quote escaped: the copy's tokens differ from the file's)
- diff        apply a unified diff to a file and print the result (copies from the file and from the diff's
              `+` lines)
- extract     extract part of a function into a new function and print the whole module (copies, moves a block)
- complete    code completion that echoes the code around it (raw completion)
Where the small test model would otherwise not do the edit (hints, write, diff), the assistant's turn starts with
the answer's first line(s), as an agent's prefill would: the reply then goes on the way the workload names.
- free        a short story at temperature 0.8: text that does not repeat
"""
from __future__ import annotations

import json

LEDGER = '''"""Read a CSV ledger of transactions and summarise it per account."""
import csv
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import date


@dataclass
class Entry:
    account: str
    day: date
    amount: float
    memo: str


def parse_entry(row):
    """One CSV row -> Entry, or None if the row is malformed."""
    try:
        year, month, day = (int(x) for x in row["date"].split("-"))
        return Entry(row["account"].strip(), date(year, month, day), float(row["amount"]), row.get("memo", ""))
    except (KeyError, ValueError):
        return None


def load_entries(path):
    entries, bad = [], 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            entry = parse_entry(row)
            if entry is None:
                bad += 1
            else:
                entries.append(entry)
    return entries, bad


def totals(entries):
    out = defaultdict(float)
    for entry in entries:
        out[entry.account] += entry.amount
    return dict(out)


def largest(entries, n=3):
    return sorted(entries, key=lambda e: abs(e.amount), reverse=True)[:n]


def check_row(row):
    """True if parse_entry accepts the row."""
    return parse_entry(row) is not None


def main(argv):
    entries, bad = load_entries(argv[1])
    for account, total in sorted(totals(entries).items()):
        print(f"{account:20} {total:12.2f}")
    for entry in largest(entries):
        print("large:", entry.day.isoformat(), entry.account, entry.amount)
    if bad:
        print(f"{bad} malformed rows skipped (see parse_entry)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
'''

SHAPES = '''import math


def circle_area(radius):
    return math.pi * radius * radius


def rectangle_area(width, height):
    return width * height


def triangle_area(base, height):
    return 0.5 * base * height


def describe(name, area, unit):
    return f"{name}: {area:.2f} {unit}^2"


def scale(values, factor):
    return [v * factor for v in values]


def largest_shape(areas):
    best_name, best_area = None, 0.0
    for name, area in areas.items():
        if area > best_area:
            best_name, best_area = name, area
    return best_name


def report(unit="cm"):
    areas = {
        "circle": circle_area(2.0),
        "rectangle": rectangle_area(3.0, 4.0),
        "triangle": triangle_area(3.0, 5.0),
    }
    for name, area in areas.items():
        print(describe(name, area, unit))
    print("largest:", largest_shape(areas))
'''

CONFIG = {"name": "orders-service", "version": "2.4.1", "port": 8080, "debug": False,
          "database": {"host": "db.internal", "port": 5432, "name": "orders", "pool": {"min": 2, "max": 10}},
          "queues": [{"name": "incoming", "retries": 3, "timeout_s": 30},
                     {"name": "billing", "retries": 5, "timeout_s": 60},
                     {"name": "shipping", "retries": 3, "timeout_s": 45}],
          "features": {"discounts": True, "gift_cards": False, "express_shipping": True},
          "admins": ["alice@example.com", "bob@example.com"]}

CART = '''from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    price: float
    quantity: int = 1


@dataclass
class Cart:
    items: list = field(default_factory=list)
    coupon: str = ""

    def add(self, sku, price, quantity=1):
        for item in self.items:
            if item.sku == sku:
                item.quantity += quantity
                return
        self.items.append(Item(sku, price, quantity))

    def remove(self, sku):
        self.items = [item for item in self.items if item.sku != sku]

    def subtotal(self):
        return sum(item.price * item.quantity for item in self.items)

    def discount(self):
        if self.coupon == "SAVE10":
            return 0.10 * self.subtotal()
        return 0.0

    def total(self):
        return round(self.subtotal() - self.discount(), 2)

    def count(self):
        return sum(item.quantity for item in self.items)
'''

WRITE_TOOL = {"type": "function", "function": {
    "name": "Write", "description": "Write a file to the local filesystem, replacing its whole content.",
    "parameters": {"type": "object", "required": ["file_path", "content"], "properties": {
        "file_path": {"type": "string", "description": "The absolute path of the file to write"},
        "content": {"type": "string", "description": "The content to write to the file"}}}}}

SERVER = '''import json
import logging
from http.server import BaseHTTPRequestHandler, HTTPServer

log = logging.getLogger("notes")
NOTES = {}


class Handler(BaseHTTPRequestHandler):
    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/notes":
            self._send(200, {"notes": list(NOTES.values())})
        elif self.path.startswith("/notes/"):
            note = NOTES.get(self.path[len("/notes/"):])
            if note is None:
                self._send(404, {"error": "not found"})
            else:
                self._send(200, note)
        else:
            self._send(404, {"error": "unknown path"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        note_id = str(len(NOTES) + 1)
        NOTES[note_id] = {"id": note_id, "text": body.get("text", "")}
        log.info("created note %s", note_id)
        self._send(201, NOTES[note_id])


def serve(port=8000):
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    serve()
'''

SERVER_DIFF = '''--- a/notes_server.py
+++ b/notes_server.py
@@ -30,9 +30,14 @@ class Handler(BaseHTTPRequestHandler):
     def do_POST(self):
         length = int(self.headers.get("Content-Length", 0))
-        body = json.loads(self.rfile.read(length) or b"{}")
+        try:
+            body = json.loads(self.rfile.read(length) or b"{}")
+        except json.JSONDecodeError:
+            self._send(400, {"error": "invalid JSON"})
+            return
         note_id = str(len(NOTES) + 1)
-        NOTES[note_id] = {"id": note_id, "text": body.get("text", "")}
+        text = str(body.get("text", "")).strip()
+        NOTES[note_id] = {"id": note_id, "text": text}
         log.info("created note %s", note_id)
         self._send(201, NOTES[note_id])
'''

ORDERS = '''import json
from datetime import datetime

TAX_RATE = 0.2


def process_order(order, inventory):
    """Check an order, reserve its items and return the receipt."""
    if not order.get("id"):
        raise ValueError("order has no id")
    if not order.get("lines"):
        raise ValueError(f"order {order['id']} has no lines")
    for line in order["lines"]:
        if line["quantity"] <= 0:
            raise ValueError(f"bad quantity for {line['sku']}")
        if inventory.get(line["sku"], 0) < line["quantity"]:
            raise ValueError(f"not enough {line['sku']} in stock")
    net = 0.0
    for line in order["lines"]:
        inventory[line["sku"]] -= line["quantity"]
        net += line["price"] * line["quantity"]
    tax = round(net * TAX_RATE, 2)
    return {
        "order": order["id"],
        "net": round(net, 2),
        "tax": tax,
        "total": round(net + tax, 2),
        "at": datetime.now().isoformat(timespec="seconds"),
    }


def main(path):
    with open(path) as f:
        data = json.load(f)
    inventory = dict(data["inventory"])
    for order in data["orders"]:
        try:
            print(process_order(order, inventory))
        except ValueError as e:
            print("rejected:", e)
'''

COMPLETE = '''import json
import os


class Inventory:
    """A small store of items and their counts."""

    def __init__(self, path):
        self.path = path
        self.items = {}

    def load(self):
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.items = json.load(f)

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2)

    def add_item(self, name, count=1):
        self.items[name] = self.items.get(name, 0) + count

    def remove_item(self, name, count=1):
        left = self.items.get(name, 0) - count
        if left > 0:
            self.items[name] = left
        else:
            self.items.pop(name, None)

    def total(self):
        return sum(self.items.values())


def report(inv):
    """Print each item and its count."""
    for name, count in inv.items.items():
        print(name, count)


def main():
    inv = Inventory("inventory.json")
    inv.load()
    inv.add_item("apple", 3)
    inv.remove_item("pear")
    inv.save()
    print(inv.total())


class TaggedInventory(Inventory):
    """An Inventory whose items also carry tags."""

    def __init__(self, path):
'''


def chatml(messages, tools=None) -> str:
    """The conversation as a ChatML prompt (Qwen2.5's format; with `tools`, its tool-calling system prompt), sent raw
    to /v1/completions: both servers then decode the same tokens (their chat endpoints differ in template details,
    e.g. a default system prompt, and so would write different replies)."""
    head = ""
    if tools:
        head = ("<|im_start|>system\nYou are a coding agent working in /work/notes.\n\n# Tools\n\nYou may call one or "
                "more functions to assist with the user query.\n\nYou are provided with function signatures within "
                "<tools></tools> XML tags:\n<tools>\n" + "\n".join(json.dumps(t) for t in tools) +
                "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call><|im_end|>\n")
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return head + turns + "<|im_start|>assistant\n"


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


WRITE_START = ('<tool_call>\n{"name": "Write", "arguments": {"file_path": "/work/notes/cart.py", "content": "'
               + json.dumps(CART.split("@dataclass\nclass Cart")[0])[1:-1])


# name -> (editing workload?, prompt, temperature, max_tokens)
WORKLOADS = {
    "rename": (True, chatml(user(
        "Rename the function parse_entry to parse_row everywhere in this module (its definition, every call and "
        "every mention) and print the whole module, nothing else:\n\n```python\n" + LEDGER + "```")), 0.0, 900),
    "hints": (True, chatml(user(
        "Add type hints to every function parameter and return value in this module. Print the whole module, "
        "nothing else:\n\n```python\n" + SHAPES + "```"))
        + "```python\nimport math\n\n\ndef circle_area(radius: float) -> float:\n", 0.0, 700),
    "json": (True, chatml(user(
        "Reformat this JSON document with 2-space indentation, keeping the keys in the same order. Print only the "
        "JSON:\n\n" + json.dumps(CONFIG, separators=(",", ":")))), 0.0, 600),
    "write": (True, chatml(user(
        "In /work/notes/cart.py, change `discount` so that the coupon \"SAVE20\" takes 20% off as well as "
        "\"SAVE10\" taking 10%. Use the Write tool to write the whole new file. This is the current file:\n\n"
        "```python\n" + CART + "```"), tools=[WRITE_TOOL]) + WRITE_START, 0.0, 900),
    "diff": (True, chatml(user(
        "Apply this diff to notes_server.py and print the whole resulting file, nothing else.\n\nnotes_server.py:\n"
        "```python\n" + SERVER + "```\n\nThe diff:\n```diff\n" + SERVER_DIFF + "```")) + "```python\n",
              0.0, 900),
    "extract": (True, chatml(user(
        "Extract the checks at the start of process_order into a new function validate_order(order, inventory) "
        "defined just above process_order, call it from process_order, and print the whole module, nothing "
        "else:\n\n```python\n" + ORDERS + "```")), 0.0, 800),
    "complete": (False, COMPLETE, 0.0, 300),
    "free": (False, chatml(user("Write a short story about a lighthouse keeper who finds a message in a bottle.")),
             0.8, 200),
}
EDITS = [name for name, (edit, *_rest) in WORKLOADS.items() if edit]
