"""A page as text for a world model: Chromium's own accessibility roles and names (the
``computedRole``/``computedName`` the browser exposes with the
``ComputedAccessibilityInfo`` Blink feature), one line per node, indented by nesting, with
a ``[bid]`` on every interactive node so actions can name it::

    [search] searchbox "Search products" value="kettle"
    [search-go] button "Search"
    heading "Shop" level=1
    list
      listitem
        [a7] link "Blue Kettle"

A bid is the element's ``data-bid`` attribute: the page's own when it has one, else a new
``aN`` written onto the element, so a node keeps its bid for as long as the page lives.
One ``page.evaluate`` walks the DOM (hidden nodes skipped); the settle wait watches DOM
mutations and in-flight requests in the page, bounded.
"""

from __future__ import annotations

WALK_JS = r"""
(cap) => {
  const INTERACTIVE = new Set(["button", "link", "textbox", "searchbox", "checkbox", "radio", "combobox", "listbox",
    "option", "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "switch", "slider", "spinbutton", "treeitem"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK"]);
  const QUIET = new Set(["generic", "none", "presentation", "", "paragraph", "group", "Section", "LabelText"]);
  const NAMED_FROM_CONTENT = new Set(["link", "button", "heading", "option", "menuitem", "tab", "cell",
    "columnheader", "rowheader", "listitem", "treeitem"]);
  let next = window.__tfNextBid || 1;
  const lines = [];
  let size = 0, truncated = false;
  const push = (line) => {
    if (truncated) return;
    if (size + line.length + 1 > cap) { truncated = true; return; }
    lines.push(line); size += line.length + 1;
  };
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  const walk = (node, depth, named) => {
    for (const child of node.childNodes) {
      if (truncated) return;
      if (child.nodeType === Node.TEXT_NODE) {
        const t = clean(child.textContent);
        if (t && !named) push("  ".repeat(depth) + "text " + JSON.stringify(t));
        continue;
      }
      if (child.nodeType !== Node.ELEMENT_NODE || SKIP.has(child.tagName)) continue;
      const el = child;
      const style = getComputedStyle(el);
      if (style.display === "none" || style.visibility === "hidden" || el.getAttribute("aria-hidden") === "true") continue;
      const role = el.computedRole || "";
      const name = clean(el.computedName);
      const interactive = INTERACTIVE.has(role) || el.hasAttribute("data-bid");
      let d = depth, childNamed = named;
      if (interactive || !QUIET.has(role)) {
        let line = "  ".repeat(depth);
        if (interactive) {
          if (!el.hasAttribute("data-bid")) el.setAttribute("data-bid", "a" + next++);
          line += "[" + el.getAttribute("data-bid") + "] ";
        }
        line += role || el.tagName.toLowerCase();
        if (name) line += " " + JSON.stringify(name.slice(0, 200));
        if (el.tagName === "INPUT" || el.tagName === "TEXTAREA") {
          if (el.type === "checkbox" || el.type === "radio") line += el.checked ? " checked" : " unchecked";
          else if (el.type !== "password" && el.value) line += " value=" + JSON.stringify(el.value.slice(0, 200));
        }
        if (el.tagName === "SELECT") line += " value=" + JSON.stringify(el.value);
        if (el.tagName === "OPTION" && el.selected) line += " selected";
        if (/^H[1-6]$/.test(el.tagName)) line += " level=" + el.tagName[1];
        if (el.disabled) line += " disabled";
        if (document.activeElement === el && el !== document.body) line += " focused";
        push(line);
        d = depth + 1;
        childNamed = named || (name && NAMED_FROM_CONTENT.has(role));
      }
      walk(el, d, childNamed);
    }
  };
  walk(document.body || document.documentElement, 0, false);
  window.__tfNextBid = next;
  const f = document.activeElement;
  return {lines, truncated, focused: f && f !== document.body ? f.getAttribute("data-bid") : null,
          scroll: [Math.round(window.scrollX), Math.round(window.scrollY)]};
}
"""

# Resolves when the DOM has been quiet for `quiet` ms and no fetch/XHR of the page is in
# flight, or after `limit` ms (then `settled` is false).
SETTLE_JS = r"""
([quiet, limit]) => new Promise((resolve) => {
  const start = performance.now();
  let last = performance.now();
  const obs = new MutationObserver(() => { last = performance.now(); });
  obs.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  const pending = () => performance.getEntriesByType("resource").filter((e) => e.responseEnd === 0).length;
  const tick = () => {
    const now = performance.now();
    if (now - last >= quiet && pending() === 0) { obs.disconnect(); resolve(true); }
    else if (now - start >= limit) { obs.disconnect(); resolve(false); }
    else setTimeout(tick, 25);
  };
  setTimeout(tick, 25);
})
"""
