"""The web environment: Playwright driving Chromium over real (local) web applications.

One browser per environment (a collection worker keeps one environment per domain), a
fresh browser context per episode (clean cookies and storage). The observation is the
page as an accessibility tree with bids (``collectors.web.page``) under a header of URL,
title, tabs and focus; ``extra`` holds URL, tabs, scroll, settle time, the last network
errors (and the HTML and a screenshot when asked). After each action the environment
waits for the page to settle (load, then a quiet DOM with no request in flight), bounded
by ``settle_timeout_ms``; the time is ``settle_ms`` and a page that never settled is
flagged ``settled: false``. Requests to origins outside the allow-list are aborted by
routing, so an agent cannot reach the internet unless the job allows it.

With ``env_id: sites`` the environment serves the shipped sites (``collectors/web/sites``)
on 127.0.0.1 with a fresh database per episode, and a task's ``check`` is SQL over it. Any
other ``env_id`` points the same environment at the user's own sites: a task's
``extra.start_url`` and the job's ``web.allowed_origins``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from typing import Any
from urllib.parse import urljoin, urlparse

from pydantic import Field

from collectors.actions import ActionError, ActionSpec
from collectors.env import EnvError, Environment, EnvOptions, Task
from collectors.web import actions as A
from collectors.web.page import SETTLE_JS, WALK_JS
from schemas.errors import MissingExtraError
from schemas.transition import Observation, VolatileSpan
from schemas.volatile import detect_spans

LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--enable-blink-features=ComputedAccessibilityInfo",
]
SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


class WebOptions(EnvOptions):
    """Settings of web episodes (the job's ``web`` section)."""

    allowed_origins: list[str] = Field(default_factory=list)  # besides the shipped sites' own origin
    screenshot: bool = False
    html: bool = False
    settle_timeout_ms: int = Field(3000, ge=100)
    quiet_ms: int = Field(150, ge=0)  # a settled page: this long with a quiet DOM and no request in flight
    obs_cap_chars: int = Field(20_000, ge=1000)
    action_timeout_ms: int = Field(5000, ge=100)
    viewport: tuple[int, int] = (1280, 800)


def chromium_path() -> str | None:
    """The system Chromium when installed (Playwright cannot download its own here), else
    None: Playwright's own browser, when one was installed with ``playwright install``."""
    env = os.environ.get("TRAJFORGE_CHROMIUM")
    if env:
        return env
    return next((p for p in SYSTEM_CHROMIUM if shutil.which(p)), None)


# (pid, thread) -> that thread's Playwright driver: the sync API is bound to the thread that
# started it, and the episode runner gives each environment a thread of its own
_DRIVER: dict[tuple[int, int], Any] = {}


def _stop_driver(driver) -> None:
    with contextlib.suppress(Exception):
        driver.stop()


def playwright_driver():
    """This thread's Playwright driver, started on first use and stopped at exit."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise MissingExtraError("playwright", "web") from None
    key = (os.getpid(), threading.get_ident())
    if key not in _DRIVER:
        import atexit

        _DRIVER[key] = driver = sync_playwright().start()
        atexit.register(_stop_driver, driver)
    return _DRIVER[key]


def stop_playwright_driver() -> None:
    """Stop this thread's driver now (it holds an asyncio loop in this thread while it runs)."""
    driver = _DRIVER.pop((os.getpid(), threading.get_ident()), None)
    if driver is not None:
        _stop_driver(driver)


def _origin(url: str) -> str:
    u = urlparse(url)
    return f"{u.scheme}://{u.netloc}"


class WebEnv(Environment):
    domain = "web"
    sandbox_backend = "playwright"

    def __init__(self, sandbox: Any = None, env_id: str = "sites", options: WebOptions | dict | None = None) -> None:
        super().__init__(env_id, options)
        self._browser = self._context = self.server = None
        self.page = None
        self.network_errors: list[str] = []
        self.blocked: list[str] = []
        self.restarts = 0
        if env_id == "sites":
            from collectors.web.sites.server import SiteServer

            self.server = SiteServer().start()
        self.allowed = {_origin(o) for o in self.options.allowed_origins} | ({self.server.url} if self.server else set())

    # -- browser life cycle ------------------------------------------------------------------
    def _launch(self) -> None:
        try:
            self._browser = playwright_driver().chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        except Exception as exc:  # playwright.Error: no browser, bad path, crash at start
            raise EnvError(f"web: cannot launch Chromium ({str(exc).splitlines()[0][:200]}): apt-get install chromium") from None
        self.image_digest = f"chromium {self._browser.version}"

    def _new_context(self) -> None:
        if self._browser is None or not self._browser.is_connected():
            if self._browser is not None:
                self.restarts += 1
                with contextlib.suppress(Exception):
                    self._browser.close()
            self._launch()
        if self._context is not None:
            with contextlib.suppress(Exception):
                self._context.close()
        w, h = self.options.viewport
        self._context = self._browser.new_context(viewport={"width": w, "height": h})
        self._context.set_default_timeout(self.options.action_timeout_ms)
        self._context.route("**/*", self._route)
        self._context.on("page", self._watch)
        self.network_errors, self.blocked = [], []
        self.page = self._context.new_page()

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(("data:", "about:", "blob:")) or _origin(url) in self.allowed:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort("blockedbyclient")

    def _watch(self, page) -> None:
        page.on("requestfailed", lambda r: self.network_errors.append(f"{r.failure} {r.url}"[:300]))
        page.on("response", lambda r: r.status >= 400 and self.network_errors.append(f"HTTP {r.status} {r.url}"[:300]))

    # -- observation -------------------------------------------------------------------------
    def _settle(self) -> tuple[float, bool]:
        """Wait for load, then a quiet DOM; a navigation that replaces the document while we
        wait (a form submitted by Enter, a redirect) starts the wait again, within the bound."""
        t0 = time.perf_counter()
        limit = self.options.settle_timeout_ms
        while (left := limit - (time.perf_counter() - t0) * 1000) > 1:
            try:
                with contextlib.suppress(Exception):  # a load that never finishes: bounded by the loop
                    self.page.wait_for_load_state("load", timeout=left)
                left = max(limit - (time.perf_counter() - t0) * 1000, 1)
                settled = bool(self.page.evaluate(SETTLE_JS, [self.options.quiet_ms, left]))
                return (time.perf_counter() - t0) * 1000, settled
            except Exception as exc:
                if self._died(exc):
                    raise EnvError(f"web: the page or browser died: {str(exc).splitlines()[0][:200]}") from None
                time.sleep(0.02)  # the document was replaced mid-wait: wait for the new one
        return (time.perf_counter() - t0) * 1000, False

    def _died(self, exc: Exception) -> bool:
        """Whether a Playwright error means the page or browser is gone (infrastructure), not the action."""
        text = str(exc).lower()
        return not self._browser.is_connected() or "crash" in text or "has been closed" in text

    def _observe(self, settle_ms: float, settled: bool, **extra: Any) -> Observation:
        try:
            tree = self.page.evaluate(WALK_JS, self.options.obs_cap_chars)
            title = self.page.title()
            tabs = [(p.title(), p.url) for p in self._context.pages]
        except Exception as exc:
            raise EnvError(f"web: cannot read the page ({str(exc).splitlines()[0][:200]})") from None
        current = self._context.pages.index(self.page)
        head = [
            f"URL: {self.page.url}",
            f"Title: {title}",
            "Tabs: " + " | ".join(f"[{i}]{'*' if i == current else ''} {t or u}" for i, (t, u) in enumerate(tabs)),
            f"Focused: {'[' + tree['focused'] + ']' if tree['focused'] else 'none'}",
            "",
        ]
        text = "\n".join(head + tree["lines"])
        if tree["truncated"]:
            text += "\n[... page truncated ...]"
        info = {
            "url": self.page.url,
            "title": title,
            "tabs": [u for _, u in tabs],
            "tab": current,
            "scroll": tree["scroll"],
            "settle_ms": round(settle_ms, 1),
            "settled": settled,
            "network_errors": self.network_errors[-5:],
            "blocked": self.blocked[-5:],
            **extra,
        }
        if self.options.html:
            info["html"] = self.page.content()
        shot = self.page.screenshot(type="png") if self.options.screenshot else None
        obs = Observation.make(text, "a11y_tree", extra=info, spans=self._spans(text), truncated=tree["truncated"])
        return Observation(obs.text, obs.format, shot, obs.extra, obs.truncated, obs.volatile_spans) if shot else obs

    def _spans(self, text: str) -> list[VolatileSpan]:
        spans = list(detect_spans(text))
        if self.server is not None:  # the local server's port changes from run to run
            port = self.server.url.rsplit(":", 1)[1]
            for m in re.finditer(re.escape(f"127.0.0.1:{port}"), text):
                s = m.start() + len("127.0.0.1:")
                if all(s >= b.end or s + len(port) <= b.start for b in spans):
                    spans.append(VolatileSpan(s, s + len(port), "port"))
        return sorted(spans, key=lambda v: v.start)

    # -- the protocol ------------------------------------------------------------------------
    def _start_url(self, task: Task | None) -> str:
        url = (task.extra.get("start_url") if task else None) or "/"
        if url.startswith("/"):
            if self.server is None:
                raise EnvError(f"task {task.id if task else '-'}: a relative start_url needs env_id 'sites'")
            url = self.server.url + url
        return url

    def _reset(self, seed: int | None, task: Task | None) -> tuple[Observation, dict[str, Any]]:
        t0 = time.perf_counter()
        if self.server is not None:
            self.server.state.reset()
        self._new_context()
        url = self._start_url(task)
        if _origin(url) not in self.allowed:
            raise EnvError(f"task {task.id if task else '-'}: start_url {url} is not in the allowed origins")
        try:
            self.page.goto(url, wait_until="load", timeout=self.options.settle_timeout_ms * 3)
        except Exception as exc:
            raise EnvError(f"web: cannot open {url} ({str(exc).splitlines()[0][:200]})") from None
        settle_ms, settled = self._settle()
        obs = self._observe(settle_ms, settled)
        return obs, {"reset_ms": (time.perf_counter() - t0) * 1000, "instruction": task.instruction if task else None}

    def _locate(self, bid: str):
        loc = self.page.locator(f'[data-bid="{bid}"]')
        n = loc.count()
        if n == 0:
            raise ActionError(f"no element with bid {bid!r} on this page")
        if not loc.first.is_visible():
            raise ActionError(f"element {bid!r} is hidden")
        return loc.first

    def _act(self, a: ActionSpec) -> dict[str, Any]:
        timeout = self.options.action_timeout_ms
        if isinstance(a, A.Click):
            self._locate(a.bid).click(timeout=timeout)
        elif isinstance(a, A.Fill):
            self._locate(a.bid).fill(a.text, timeout=timeout)
        elif isinstance(a, A.SelectOption):
            el = self._locate(a.bid)
            try:
                el.select_option(a.value, timeout=timeout)
            except Exception:
                el.select_option(label=a.value, timeout=timeout)
        elif isinstance(a, A.Hover):
            self._locate(a.bid).hover(timeout=timeout)
        elif isinstance(a, A.Press):
            self.page.keyboard.press(a.key)
        elif isinstance(a, A.Scroll):
            self.page.mouse.wheel(a.dx, a.dy)
        elif isinstance(a, A.Goto | A.NewTab):
            url = a.url and urljoin(self.page.url, a.url)
            if url and _origin(url) not in self.allowed:
                self.blocked.append(url)
                raise ActionError(f"navigation to {url} blocked: origin not in the allowed list")
            if isinstance(a, A.NewTab):
                self.page = self._context.new_page()
            if url:
                self.page.goto(url, wait_until="commit", timeout=timeout)
        elif isinstance(a, A.GoBack):
            self.page.go_back(wait_until="commit", timeout=timeout)
        elif isinstance(a, A.SwitchTab):
            pages = self._context.pages
            if not 0 <= a.index < len(pages):
                raise ActionError(f"no tab {a.index} (there are {len(pages)})")
            self.page = pages[a.index]
            self.page.bring_to_front()
        elif isinstance(a, A.CloseTab):
            pages = self._context.pages
            if len(pages) == 1:
                raise ActionError("the last tab cannot be closed")
            i = pages.index(self.page)
            self.page.close()
            self.page = self._context.pages[max(i - 1, 0)]
        elif isinstance(a, A.SendMsgToUser):
            return {"message": a.text}
        return {}

    def _step(self, action: ActionSpec) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        t0 = time.perf_counter()
        try:
            extra = self._act(action)
        except ActionError:
            raise
        except Exception as exc:  # playwright.Error / TimeoutError
            text = str(exc).splitlines()[0][:300]
            if self._died(exc):
                raise EnvError(f"web: the browser died during {action.kind}: {text}") from None
            raise ActionError(f"{action.kind} failed: {text}") from None
        action_ms = (time.perf_counter() - t0) * 1000
        settle_ms, settled = self._settle()
        t1 = time.perf_counter()
        obs = self._observe(settle_ms, settled, **extra)
        terminated = isinstance(action, A.SendMsgToUser)
        return (
            obs,
            None,
            terminated,
            {"action_ms": action_ms, "settle_ms": settle_ms, "observe_ms": (time.perf_counter() - t1) * 1000},
        )

    def check_task(self, task: Task) -> tuple[float | None, str]:
        """A shipped site's task: ``check`` is SQL over the episode's database; a first
        column that is true means success."""
        if task.check is None:
            return None, "no check"
        if self.server is None:
            return None, "checks need the shipped sites (env_id: sites)"
        try:
            rows = self.server.state.query(task.check)
        except Exception as exc:
            return 0.0, f"check failed: {exc}"
        ok = bool(rows and rows[0] and rows[0][0])
        return (1.0 if ok else 0.0), repr(rows[:3])

    def _close(self) -> None:
        for obj in (self._context, self._browser):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        if self.server is not None:
            self.server.stop()

    def release_thread(self) -> None:
        """The episode runner ends this environment's thread: its Playwright driver goes too."""
        stop_playwright_driver()
