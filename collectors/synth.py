"""Synthetic transitions for every domain, for tests, benchmarks and the demo.

Trajectories are multi-step and chained (each state is the previous next_state), with
observations of realistic shape and size (1-8 KB by default, log-uniform), run-time
noise (timestamps, PIDs, temp paths, UUIDs, durations) recorded as volatile spans, a
share of failed actions, and a chosen ratio of duplicate trajectories: half exact
copies (same content, other ids and times) and half near copies (re-wrapped, a word
in fifty replaced and two words swapped per observation, spans kept valid). Each domain's look is a ``SyntheticDomain``
that its spec names (``schemas.domains``); its observations are in a format the domain's
environment emits. Same seed, same records::

    summary = synth_store("store", transitions=1000, seed=0, duplicates=0.1)
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from schemas.domains import DOMAINS
from schemas.errors import StoreError
from schemas.transition import Action, Observation, Provenance, Transition, VolatileSpan

if TYPE_CHECKING:
    from pipelines.store import Store

COLLECTOR = "synth"
COLLECTOR_VERSION = "1"
EPOCH = datetime(2026, 11, 1, tzinfo=UTC)

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "config",
    "server",
    "client",
    "request",
    "response",
    "handler",
    "token",
    "buffer",
    "stream",
    "record",
    "batch",
    "shard",
    "index",
    "query",
    "filter",
    "update",
    "delete",
    "create",
    "module",
    "package",
    "install",
    "version",
    "build",
    "test",
    "error",
    "warning",
    "info",
    "debug",
    "user",
    "admin",
    "account",
    "order",
    "cart",
    "product",
    "search",
    "result",
    "page",
    "title",
    "header",
    "footer",
    "button",
    "input",
    "field",
    "value",
    "window",
    "dialog",
    "file",
    "folder",
    "path",
    "system",
]
_FILES = [
    "README.md",
    "setup.py",
    "pyproject.toml",
    "src",
    "tests",
    "docs",
    "main.py",
    "utils.py",
    "config.yaml",
    "Makefile",
    "requirements.txt",
    "app.py",
    "models.py",
    "views.py",
    "data.csv",
    "notes.txt",
]
_CMDS = [
    "ls -la",
    "cat README.md",
    "ps aux",
    "git log --oneline -5",
    "python3 -m pytest -q",
    "df -h",
    "date",
    "grep -rn TODO src",
    "find . -name '*.py'",
    "pip list",
    "git status",
    "head -n 40 main.py",
    "env | sort",
]
_PY = [
    "def {w}_{v}(self, {x}):",
    "    return self.{w}.get({x!r})",
    "class {W}{V}:",
    "    {x} = {w}_{v}({n})",
    "import {w}",
    "from {w}.{v} import {W}",
    "    if {x} is None:",
    "        raise ValueError({x!r})",
    "    for {x} in self.{w}s:",
    "        yield {x}.{v}",
    "# {w} {v} {x}",
    '    """{W} the {v}."""',
]


def _fill(rng: random.Random, template: str) -> str:
    w, v, x = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
    return template.format(w=w, v=v, x=x, W=w.title(), V=v.title(), n=rng.randint(0, 999))


class _Text:
    """Builds an observation's text while recording where the volatile pieces go."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[VolatileSpan] = []
        self.size = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def volatile(self, text: str, kind: str) -> None:
        self.spans.append(VolatileSpan(self.size, self.size + len(text), kind))
        self.add(text)

    def build(self) -> tuple[str, tuple[VolatileSpan, ...]]:
        return "".join(self.parts), tuple(self.spans)


def _noise(rng: random.Random, kind: str, at: datetime) -> str:
    if kind == "timestamp":
        return (at + timedelta(milliseconds=rng.randint(0, 10**7))).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if kind == "pid":
        return str(rng.randint(300, 65000))
    if kind == "temp_path":
        return "/tmp/tmp" + "".join(rng.choices(string.ascii_lowercase + string.digits, k=8))
    if kind == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return f"{rng.random() * 5:.2f}s"


@dataclass(frozen=True)
class SyntheticDomain:
    """How one domain's synthetic transitions look; a domain's spec names its generator
    (``schemas.domains``: ``synthetic="collectors.synth:WEB"``).

    ``line`` makes one line of an observation's body (a pool of them is made per run),
    ``action`` an action from a random word, ``header`` an observation's first lines and
    ``extra`` (given the action that led to it and the step). ``format`` is one of the
    formats the domain's environment emits (None: its usual one)."""

    env_ids: tuple[str, ...]
    line: Callable[[random.Random], str]
    action: Callable[[random.Random, str], Action]
    header: Callable[[random.Random, Action | None, int], tuple[str, dict]]
    format: str | None = None


def _terminal_line(r: random.Random) -> str:
    return r.choice(
        [
            lambda: (
                f"-rw-r--r-- 1 agent agent {r.randint(10, 99999):>6} Nov {r.randint(1, 30):>2} {r.randint(0, 23):02d}:{r.randint(0, 59):02d} {r.choice(_FILES)}"
            ),
            lambda: (
                f"agent    {r.randint(300, 60000):>6}  {r.random() * 9:.1f}  {r.random() * 3:.1f} {r.randint(1000, 999999):>7} python3 {r.choice(_FILES)}"
            ),
            lambda: f"{r.getrandbits(28):07x} {_fill(r, '{W} {v} {x}')} ({r.randint(1, 99)} files changed)",
            lambda: f"{r.choice(_FILES)}:{r.randint(1, 400)}: # TODO {_fill(r, '{w} the {v} {x}')}",
            lambda: (
                f"tests/test_{r.choice(_WORDS)}.py::test_{r.choice(_WORDS)}_{r.choice(_WORDS)} {r.choice(['PASSED', 'PASSED', 'FAILED'])}"
            ),
        ]
    )()


def _terminal_header(r: random.Random, action: Action | None, step: int) -> tuple[str, dict]:
    cmd = action.args.get("command", "") if action else ""
    code = 0 if r.random() > 0.15 else r.choice((1, 2, 127))
    return f"$ {cmd}\n", {"cwd": "/work", "exit_code": code}


TERMINAL = SyntheticDomain(
    ("bash-debian", "bash-python"),
    _terminal_line,
    lambda r, w: Action.make("run", command=r.choice(_CMDS), timeout=30),
    _terminal_header,
)


def _swe_action(r: random.Random, w: str) -> Action:
    kind = r.choice(["view", "search", "edit", "run_tests"])
    if kind == "view":
        return Action.make("view", path=f"src/{w}.py", start=r.randint(1, 200), end=r.randint(201, 400))
    if kind == "edit":
        return Action.make("str_replace", path=f"src/{w}.py", old=f"return {w}", new=f"return {w} or None")
    if kind == "search":
        return Action.make("search", pattern=w, path="src")
    return Action.make("run_tests", command="python3 -m pytest -q")


SWE = SyntheticDomain(
    ("swe-requests", "swe-attrs", "swe-click"),
    lambda r: f"{r.randint(1, 900):>5}\t{_fill(r, r.choice(_PY))}",
    _swe_action,
    lambda r, action, step: ("", {"open_file": f"src/{r.choice(_WORDS)}.py", "cwd": "/work/repo"}),
    format="file_view",
)


def _web_line(r: random.Random) -> str:
    role = r.choice(["link", "button", "textbox", "heading", "listitem", "img", "checkbox", "combobox"])
    return f'{"  " * r.randint(1, 5)}- {role} "{_fill(r, "{W} {v} {x}")}" [bid={r.choice("abcdefgh")}{r.randint(1, 400)}]'


def _web_action(r: random.Random, w: str) -> Action:
    return r.choice(
        [
            lambda: Action.make("click", bid=f"a{r.randint(1, 400)}"),
            lambda: Action.make("fill", bid=f"b{r.randint(1, 400)}", text=w),
            lambda: Action.make("scroll", dx=0, dy=400),
        ]
    )()


def _web_header(r: random.Random, action: Action | None, step: int) -> tuple[str, dict]:
    page = r.choice(_WORDS)
    return f"URL: http://127.0.0.1:8080/{page}\nTitle: {page.title()}\n", {"url": f"http://127.0.0.1:8080/{page}"}


WEB = SyntheticDomain(("shop", "wiki", "tracker"), _web_line, _web_action, _web_header)


def _os_line(r: random.Random) -> str:
    role = r.choice(["push button", "label", "text", "menu item", "table cell", "frame", "panel", "check box"])
    x, y = r.randint(0, 1200), r.randint(0, 780)
    return f'{"  " * r.randint(1, 6)}[{r.randint(1, 999)}] {role} "{_fill(r, "{W} {v}")}" ({x},{y},{r.randint(20, 300)},{r.randint(16, 60)}) enabled visible'


def _os_action(r: random.Random, w: str) -> Action:
    return r.choice(
        [
            lambda: Action.make("click", x=r.randint(0, 1279), y=r.randint(0, 799), button="left"),
            lambda: Action.make("type_text", text=f"{w} {r.choice(_WORDS)}"),
            lambda: Action.make("hotkey", keys=["ctrl", "s"]),
        ]
    )()


OS = SyntheticDomain(
    ("desktop-editor", "desktop-files"),
    _os_line,
    _os_action,
    lambda r, action, step: ('window "Text Editor" active\n', {"active_window": "Text Editor"}),
)


def _android_line(r: random.Random) -> str:
    cls = r.choice(["TextView", "Button", "ImageView", "LinearLayout", "EditText", "RecyclerView", "Switch"])
    x, y = r.randint(0, 1000), r.randint(0, 2200)
    return (
        f"{'  ' * r.randint(1, 6)}[{r.randint(0, 300)}] android.widget.{cls} id=com.example:id/{r.choice(_WORDS)} "
        f'text="{_fill(r, "{W} {v}")}" clickable={r.choice(["true", "false"])} bounds=[{x},{y}][{x + 80},{y + 120}]'
    )


def _android_action(r: random.Random, w: str) -> Action:
    return r.choice(
        [
            lambda: Action.make("click", index=r.randint(0, 300)),
            lambda: Action.make("input_text", text=w, index=r.randint(0, 300)),
            lambda: Action.make("navigate_back"),
        ]
    )()


ANDROID = SyntheticDomain(
    ("sim-settings", "sim-notes"),
    _android_line,
    _android_action,
    lambda r, action, step: (
        "package=com.example.app activity=.MainActivity orientation=0 size=1080x2400\n",
        {"package": "com.example.app", "activity": ".MainActivity"},
    ),
)


MCP = SyntheticDomain(
    ("mcp-time", "mcp-mail", "mcp-bank"),
    lambda r: (
        f'  {{"id": {r.randint(1, 9999)}, "{r.choice(_WORDS)}": "{_fill(r, "{w} {v} {x}")}", "count": {r.randint(0, 500)}, "ok": {r.choice(["true", "false"])}}},'
    ),
    lambda r, w: Action.make("call_tool", name=f"{w}_{r.choice(['list', 'get', 'create'])}", arguments={"query": w, "limit": 10}),
    lambda r, action, step: ("[\n" if step else "tools: list, get, create\n", {"server": "stub"}),
)


def _search_line(r: random.Random) -> str:
    w = r.choice(_WORDS)
    return (
        f"{r.randint(1, 10)}. {_fill(r, '{W} {V}: {x}')}\n   https://docs.example.org/{w}/{r.choice(_WORDS)}.html\n"
        f"   {_fill(r, 'The {w} {v} handles {x} when the')} {_fill(r, '{w} is {v}.')}"
    )


def _search_action(r: random.Random, w: str) -> Action:
    return r.choice(
        [
            lambda: Action.make("search", query=f"{w} {r.choice(_WORDS)}", top_k=5),
            lambda: Action.make("open", doc_id=f"doc-{r.randint(1, 5000)}"),
        ]
    )()


SEARCH = SyntheticDomain(
    ("search-man",),
    _search_line,
    _search_action,
    lambda r, action, step: ("", {"index": "man-v1", "k1": 1.2, "b": 0.75}),
    format="search_results",
)


@dataclass
class SynthSummary:
    run_id: str
    transitions: int = 0
    trajectories: int = 0
    exact_duplicate_trajectories: int = 0
    near_duplicate_trajectories: int = 0
    by_domain: dict[str, int] = field(default_factory=dict)
    planted: dict[str, str] = field(default_factory=dict)  # copy trajectory id -> the trajectory it copies


class Synthesizer:
    """Deterministic generator of transitions; ``transitions()`` streams them."""

    def __init__(
        self,
        seed: int = 0,
        *,
        run_id: str | None = None,
        duplicates: float = 0.0,
        min_obs_bytes: int = 1024,
        max_obs_bytes: int = 8192,
        domains: Sequence[str] | None = None,
        pool_size: int = 4000,
        failed_ratio: float = 0.05,
    ) -> None:
        if not 0.0 <= duplicates < 1.0:
            raise ValueError(f"duplicates must be in [0, 1), got {duplicates}")
        domains = tuple(DOMAINS if domains is None else domains)  # default: every registered domain
        unknown = set(domains) - set(DOMAINS)
        if unknown:
            raise ValueError(f"unknown domain {sorted(unknown)[0]!r}")
        self.generators = {d: DOMAINS[d].synthesizer() for d in domains}
        self.formats = {d: g.format or DOMAINS[d].format for d, g in self.generators.items()}
        for d, fmt in self.formats.items():
            if fmt not in DOMAINS[d].formats:
                raise ValueError(f"synthetic {d}: format {fmt!r} is not one its environment emits {DOMAINS[d].formats}")
        self.seed, self.duplicates, self.domains = seed, duplicates, domains
        self.run_id = run_id or f"synth-s{seed}"
        # trajectory ids are unique across seeds even when runs share an id
        self._traj_prefix = self.run_id if run_id is None else f"{run_id}-s{seed}"
        self.min_obs, self.max_obs, self.failed_ratio = min_obs_bytes, max_obs_bytes, failed_ratio
        self.rng = random.Random(seed)
        pool_rng = random.Random(seed ^ 0x5EED)
        self.pools = {d: [g.line(pool_rng) for _ in range(pool_size)] for d, g in self.generators.items()}
        self.summary = SynthSummary(self.run_id)
        self._clock = EPOCH + timedelta(days=seed % 28)

    def _observation(self, domain: str, header: str, extra: dict) -> Observation:
        r = self.rng
        target = int(self.min_obs * (self.max_obs / self.min_obs) ** r.random())
        text = _Text()
        text.add(header)
        pool = self.pools[domain]
        while text.size < target:
            lines = r.choices(pool, k=8)
            text.add("\n".join(lines))
            text.add("\n")
            kind = r.choice(("timestamp", "pid", "temp_path", "uuid", "duration"))
            text.add(f"[{kind}] ")
            text.volatile(_noise(r, kind, self._clock), kind)
            text.add("\n")
        body, spans = text.build()
        return Observation.make(body, self.formats[domain], extra=extra, spans=spans, truncated=False)

    def _trajectory(self, domain: str, index: int, steps: int) -> list[Transition]:
        r = self.rng
        gen = self.generators[domain]
        env_id = r.choice(gen.env_ids)
        task_id = f"{env_id}/task-{r.randint(0, 199):03d}"
        traj_id = f"{self._traj_prefix}-{index:08d}"
        instruction = f"{_fill(r, '{W} the {v} of {x}')} and report the result."
        prov = self._provenance(r)
        header, extra = gen.header(r, None, 0)
        state = self._observation(domain, header, extra)
        out = []
        for step in range(steps):
            action = gen.action(r, r.choice(_WORDS))
            header, extra = gen.header(r, action, step + 1)
            failed = r.random() < self.failed_ratio
            next_state = state if failed else self._observation(domain, header, extra)
            last = step == steps - 1
            out.append(
                Transition.create(
                    trajectory_id=traj_id,
                    step=step,
                    domain=domain,
                    env_id=env_id,
                    task_id=task_id,
                    instruction=instruction,
                    state=state,
                    action=action,
                    next_state=next_state,
                    reward=(1.0 if r.random() < 0.5 else 0.0) if last else None,
                    terminated=last,
                    action_error=f"invalid action: {action.kind} target not found" if failed else None,
                    action_ms=round(r.uniform(5, 900), 2),
                    observe_ms=round(r.uniform(1, 60), 2),
                    settle_ms=round(r.uniform(0, 300), 2),
                    provenance=prov if step == 0 else _later(prov, step),
                )
            )
            state = next_state
        return out

    def _provenance(self, r: random.Random) -> Provenance:
        self._clock += timedelta(seconds=r.uniform(1, 30))
        return Provenance(
            run_id=self.run_id,
            collector=COLLECTOR,
            collector_version=COLLECTOR_VERSION,
            sandbox_backend="none",
            seed=self.seed,
            policy="synthetic",
            job_id=f"synth-{self.seed}",
            collected_at=self._clock,
        )

    def _copy(self, source: list[Transition], index: int, near: bool) -> list[Transition]:
        """A duplicate of a trajectory under a new id: exact, or with a few characters changed."""
        traj_id = f"{self._traj_prefix}-{index:08d}"
        prov = self._provenance(self.rng)
        edited: dict[int, Observation] = {}

        def edit(obs: Observation) -> Observation:
            if not near:
                return obs
            if id(obs) not in edited:
                edited[id(obs)] = _perturb(self.rng, obs)
            return edited[id(obs)]

        return [
            t.evolve(
                trajectory_id=traj_id,
                state=edit(t.state),
                next_state=edit(t.next_state),
                provenance=prov if t.step == 0 else _later(prov, t.step),
            )
            for t in source
        ]

    def transitions(self, n: int) -> Iterator[Transition]:
        r, produced, index, recent = self.rng, 0, 0, []
        while produced < n:
            steps = min(r.randint(2, 10), n - produced)
            source = r.choice(recent) if recent and r.random() < self.duplicates else None
            if source is not None and len(source) <= n - produced:  # whole copies: planted = well defined
                near = r.random() < 0.5
                traj = self._copy(source, index, near)
                self.summary.planted[traj[0].trajectory_id] = source[0].trajectory_id
                if near:
                    self.summary.near_duplicate_trajectories += 1
                else:
                    self.summary.exact_duplicate_trajectories += 1
            else:
                traj = self._trajectory(self.domains[index % len(self.domains)], index, steps)
                recent = [*recent, traj][-64:]
            index += 1
            produced += len(traj)
            self.summary.trajectories += 1
            self.summary.transitions += len(traj)
            d = traj[0].domain
            self.summary.by_domain[d] = self.summary.by_domain.get(d, 0) + len(traj)
            yield from traj


def _later(prov: Provenance, step: int) -> Provenance:
    return replace(prov, collected_at=prov.collected_at + timedelta(seconds=step * 2))


def _perturb(r: random.Random, obs: Observation) -> Observation:
    """A near copy of an observation, outside its volatile spans (which move with the text):
    re-wrapped (a tenth of the blanks become line breaks, a fifth of the line breaks
    blanks), about one word in fifty replaced (at least one) and two neighbouring
    words swapped. A copy stays at a word 5-gram Jaccard of about 0.8 to its source: a
    near duplicate, but one a stage that ignored layout or word order would miss."""
    text, spans = obs.text, sorted(obs.volatile_spans, key=lambda s: s.start)
    cuts = [0, *[x for s in spans for x in (s.start, s.end)], len(text)]
    outside = [text[cuts[i] : cuts[i + 1]] for i in range(0, len(cuts), 2)]
    words = [(k, m) for k, part in enumerate(outside) for m in range(len(part.split(" ")))]
    pieces = [part.split(" ") for part in outside]
    for k, m in r.sample(words, max(1, len(words) // 50)) if words else ():
        if pieces[k][m].strip():
            pieces[k][m] = "".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(3, 8)))
    if len(words) > 2:
        k, m = words[r.randrange(len(words) - 1)]
        if m + 1 < len(pieces[k]):
            pieces[k][m], pieces[k][m + 1] = pieces[k][m + 1], pieces[k][m]
    edited = []
    for part in pieces:
        joined = "".join(w + (("\n" if r.random() < 0.1 else " ") if i < len(part) - 1 else "") for i, w in enumerate(part))
        edited.append("".join(" " if c == "\n" and r.random() < 0.2 else c for c in joined))
    out, new_spans = [edited[0]], []
    for i, span in enumerate(spans):
        start = sum(len(x) for x in out)
        out.append(text[span.start : span.end])
        new_spans.append(replace(span, start=start, end=start + span.end - span.start))
        out.append(edited[i + 1])
    return Observation("".join(out), obs.format, obs.screenshot_png, obs.extra, obs.truncated, tuple(new_spans))


def synth_store(
    store: Store | str,
    *,
    transitions: int,
    seed: int = 0,
    duplicates: float = 0.0,
    run_id: str | None = None,
    progress: Callable[[int], None] | None = None,
    **options,
) -> SynthSummary:
    """Write ``transitions`` synthetic transitions into a new run of ``store`` (a handle or a path)."""
    from pipelines.store import Store, StoreWriter

    store = Store.open(store, must_exist=False)
    gen = Synthesizer(seed, run_id=run_id, duplicates=duplicates, **options)
    existing = [r for r in store.runs() if r.run_id == gen.run_id] if store.exists() else []
    if existing:
        raise StoreError(f"{store.uri}: run {gen.run_id!r} already exists; pick another --seed or --run-id")
    with StoreWriter(store, gen.run_id) as writer:
        for i, t in enumerate(gen.transitions(transitions), 1):
            writer.write(t)
            if progress and i % 1000 == 0:
                progress(i)
    return gen.summary
