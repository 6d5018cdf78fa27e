"""`python -m tests.fuzz.atheris.run TARGET [libFuzzer flags...]`: one coverage-guided target.

atheris (libFuzzer for Python) takes the process over and ends it with sys.exit, so each target
runs in a process of its own (tests/fuzz/test_atheris.py starts them). The target's module is
imported inside atheris.instrument_imports, limited to the packages under test (agent, drivers,
and for some targets the library whose parser ours relies on), so coverage feedback comes from
the parsers and not from everything imported.

The corpus starts from the target's seeds (repository configs, programs, simulator captures)
plus tests/fuzz/corpus/TARGET/ (committed inputs worth keeping: past crashes and seeds that
reach deep), copied to a scratch directory libFuzzer may write new inputs into. libFuzzer prints
its final stats (-print_final_stats=1): `stat::number_of_executed_units` is the case count.
A crash (an exception escaping the target) is printed with its traceback and saved as
`crash-<sha1>` under -artifact_prefix (default: the scratch directory, printed at the start).

    python -m tests.fuzz.atheris.run gcode -runs=100000
    python -m tests.fuzz.atheris.run capture_npz -max_total_time=600
    python -m tests.fuzz.atheris.run --list

`--work=DIR` puts the corpus and crash files in DIR (default: a new directory under $TMPDIR,
printed, kept for inspection). Arguments not starting with '-' are more seed directories.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import tempfile
from pathlib import Path

from tests.fuzz.atheris.oracle import Target

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
# target name -> (module defining TARGET or TARGETS, top-level packages atheris instruments for
# coverage: ours, plus python-can for its socketcand parser, cantools for its frame decoding,
# numpy for its .npy header reader; atheris instruments whole top-level packages only)
OURS = ("agent", "drivers")
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gcode": ("tests.fuzz.atheris.gcode", OURS),
    "config_yaml": ("tests.fuzz.atheris.config", OURS),
    "serial_frames": ("tests.fuzz.atheris.serial", OURS),
    "can_frames": ("tests.fuzz.atheris.can", (*OURS, "cantools")),
    "socketcand_lines": ("tests.fuzz.atheris.socketcand", (*OURS, "can")),
    "capture_csv": ("tests.fuzz.atheris.capture", OURS),
    "capture_npz": ("tests.fuzz.atheris.capture", (*OURS, "numpy")),
    "mqtt_outbox": ("tests.fuzz.atheris.outbox", OURS),
}
# Not a parser: breaks the property on purpose so that the runner's crash reports are tested.
SELFTEST = {"selftest": ("tests.fuzz.atheris.selftest", ("tests.fuzz.atheris.selftest",))}
# Cap on one seed: libFuzzer's -max_len defaults to the longest seed, and a long input is slow.
MAX_SEED_BYTES = 8192


def load_target(name: str) -> Target:
    """The target's TARGET (or TARGETS[name]) without instrumentation (pytest, replays)."""
    module = importlib.import_module({**MODULES, **SELFTEST}[name][0])
    targets = getattr(module, "TARGETS", None)
    target: Target = targets[name] if targets is not None else module.TARGET
    return target


def write_seeds(target: Target, into: Path) -> int:
    """The target's seeds and its committed corpus as files of `into`; how many."""
    into.mkdir(parents=True, exist_ok=True)
    n = 0
    stored = CORPUS / target.name
    blobs = [p.read_bytes() for p in sorted(stored.rglob("*")) if p.is_file()]
    for blob in [*target.seeds(), *blobs]:
        blob = blob[:MAX_SEED_BYTES]
        (into / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
        n += 1
    return n


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] == "--list":
        print("\n".join(MODULES))
        return 0
    name, rest = argv[0], argv[1:]
    work_arg = next((a for a in rest if a.startswith("--work=")), None)
    flags = [a for a in rest if a.startswith("-") and a != work_arg]
    more_corpora = [a for a in rest if not a.startswith("-")]  # read, never written
    registry = {**MODULES, **SELFTEST}
    if name not in registry:
        print(f"atheris.run: unknown target {name!r}; known: {', '.join(MODULES)}", file=sys.stderr)
        return 64
    import atheris  # only here: the targets themselves run without it

    with atheris.instrument_imports(include=list(registry[name][1])):
        target = load_target(name)
    if work_arg is not None:
        work = Path(work_arg.removeprefix("--work="))
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix=f"jha-atheris-{name}-"))
    corpus = work / "corpus"
    seeded = write_seeds(target, corpus)
    print(f"atheris.run: {name}: {seeded} seeds in {corpus}", flush=True)
    if not any(f.startswith("-artifact_prefix=") for f in flags):
        flags.append(f"-artifact_prefix={work}/")
    if not any(f.startswith("-max_len=") for f in flags):
        flags.append(f"-max_len={MAX_SEED_BYTES}")
    args = [sys.argv[0], "-print_final_stats=1", *flags, str(corpus), *more_corpora]
    atheris.Setup(args, target.one_input)
    atheris.Fuzz()  # never returns: libFuzzer exits the process (0 when done, 1 on a crash)
    return 70


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
