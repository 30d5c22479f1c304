"""What ``lightning-fed`` prints: its own lines and the progress bar; one line per error.

Run as a user runs it (a subprocess), and on a simulated CPU with AVX512-BF16
(``tests/helpers/simulated_avx512bf16.py``), where bitsandbytes, imported through PEFT, logs a
hub-download failure at import unless the package holds it back.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed import console

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = str(ROOT / "tests" / "helpers" / "simulated_avx512bf16.py")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
QUIET_ENV = ("TRANSFORMERS_VERBOSITY", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")
for name in ("LIGHTNING_FED_DEBUG", console.VERBOSE_ENV, *QUIET_ENV):
    ENV.pop(name, None)
FEDERATION_LINE = "federation: 4 clients, 72 training examples, per client min 18 / median 18 / max 18"
# tiny's 2 clients a round train together under the default batch_clients: auto (issue 43), said once.
GROUP_LINE = "federation.batch_clients: auto: clients trained together K = 2"
# Lightning's progress bars: the round bar (FederatedProgressBar) and the validation bar.
PROGRESS = re.compile(
    r"^\s*$|^(Round \d+/\d+|Epoch \d+|Training|Sanity Checking|Validation|Validation DataLoader \d+)\b.*"
)


def _cli(tmp_path: Path, *args: str, simulate: bool = True) -> tuple[subprocess.CompletedProcess, Path]:
    marker = tmp_path / "avx512bf16-path-taken"
    runner = [sys.executable, SIMULATE] if simulate else [sys.executable, "-m"]
    proc = subprocess.run(
        [*runner, "lightning_fed.cli", *args],
        cwd=ROOT,
        env={**ENV, "SIMULATED_AVX512BF16_MARKER": str(marker)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return proc, marker


def _tiny(root: Path, *extra: str) -> list[str]:
    return ["fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", *extra]


def _not_progress(stderr: str) -> list[str]:
    lines = re.split(r"[\r\n]", stderr)
    return [line for line in lines if not PROGRESS.match(line.replace("\x1b[A", ""))]


def test_a_tiny_fit_prints_the_package_lines_and_the_progress_bar_only(tmp_path):
    proc, marker = _cli(tmp_path, *_tiny(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.is_file(), "bitsandbytes did not take the AVX512-BF16 path: the test shows nothing"
    assert proc.stderr == FEDERATION_LINE + "\n" + GROUP_LINE + "\n"
    assert "Round 3/3" in proc.stdout  # Lightning's progress bar (TQDM writes to stdout), and fit's closing line
    (closing,) = _not_progress(proc.stdout)
    assert closing.startswith("run folder: "), closing


def test_verbose_brings_the_libraries_notices_back(tmp_path):
    one_step = ("--federation.rounds=1", "--federation.local_steps=1")  # the notices come with any fit
    proc, _ = _cli(tmp_path, "--verbose", *_tiny(tmp_path / "run", "--trainer.enable_progress_bar=false", *one_step))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for notice in ("Seed set to 0", "GPU available: False", "`Trainer.fit` stopped", FEDERATION_LINE):
        assert notice in proc.stderr, notice
    assert "Failed to load CPU gemm_4bit_forward" not in proc.stderr  # nothing a user can act on, ever


def test_a_config_error_is_exactly_one_line(tmp_path):
    """Refused before torch from the config's text: no ``--debug`` hint (its traceback would show
    only the precheck)."""
    proc, _ = _cli(tmp_path, *_tiny(tmp_path / "run", "--model.init_args.lr=-0.1"))
    assert proc.returncode == 2
    assert proc.stderr == "error: model.lr must be in (0, 10.0], got -0.1\n"
    assert proc.stdout == ""
    assert not (tmp_path / "run").exists()


def test_a_data_error_is_exactly_one_line(tmp_path):
    proc, _ = _cli(tmp_path, *_tiny(tmp_path / "run", "--data.init_args.dataset=no/such/file.jsonl"))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no/such/file.jsonl" in lines[0], proc.stderr


def test_a_flower_argument_error_is_one_line_before_any_model_library_is_imported(tmp_path):
    probe = (
        "import sys, runpy; sys.argv = ['lightning-fed', 'flower', 'clientapp', '--runtime-api-address', 'nope',"
        " '--insecure'];\n"
        "from lightning_fed.cli import console_main\n"
        "code = console_main()\n"
        "heavy = ('torch', 'lightning', 'transformers', 'peft', 'bitsandbytes')\n"
        "heavy = sorted(m for m in heavy if m in sys.modules)\n"
        "print(code, heavy)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800
    )
    assert proc.stdout.strip() == "2 []"
    assert proc.stderr == "error: --runtime-api-address must be host:port, got 'nope'\n"


def test_help_imports_nothing_heavy():
    probe = (
        "import sys, io, contextlib\n"
        "from lightning_fed.cli import console_main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = console_main(['--help'])\n"
        "print(code, sorted(m for m in ('torch', 'lightning', 'transformers', 'peft') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800
    )
    assert proc.stdout.strip() == "0 []" and proc.stderr == ""


# ------------------------------------------------------------------ the filters, in-process
def _record(pathname: str, level: int = logging.INFO, msg: str = "m") -> logging.LogRecord:
    return logging.LogRecord("lightning.pytorch.utilities.rank_zero", level, pathname, 1, msg, None, None)


def test_own_lines_passes_the_package_and_errors_only():
    own = console.OwnLines()
    package_file = str(Path(console.__file__).parent / "federation" / "report.py")
    assert own.filter(_record(package_file))
    assert not own.filter(_record("/site-packages/lightning/pytorch/trainer/setup.py"))
    assert own.filter(_record("/site-packages/lightning/pytorch/trainer/setup.py", logging.ERROR))
    # A sibling folder whose name starts like the package's is not the package.
    assert not own.filter(_record(console.PACKAGE_DIR + "_extras/x.py"))


def test_the_kernels_hub_notice_is_dropped_and_nothing_else():
    drop = console.DropKernelsHubNotice()
    notice = logging.LogRecord(
        console.BNB_CPU_LOGGER, logging.WARNING, "ops.py", 1, console.BNB_KERNELS_NOTICE + ": %s. Please", ("x",), None
    )
    assert not drop.filter(notice)
    assert drop.filter(logging.LogRecord(console.BNB_CPU_LOGGER, logging.WARNING, "ops.py", 1, "other", None, None))


def test_quiet_warnings_show_the_package_warnings_only(capsys):
    show = console._own_warnings_only()
    show(UserWarning("third party"), UserWarning, "/site-packages/transformers/modeling_utils.py", 3303)
    show(UserWarning("truncated 3 pairs"), UserWarning, str(Path(console.__file__).parent / "datamodules" / "x.py"), 1)
    assert capsys.readouterr().err == "warning: truncated 3 pairs\n"


def test_a_truncation_warning_is_shown_as_one_warning_line(tmp_path):
    run = _tiny(tmp_path / "run", "--data.init_args.max_length=60", "--data.init_args.on_overflow=truncate")
    proc, _ = _cli(tmp_path, *run, "--trainer.enable_progress_bar=false", "--federation.rounds=1", simulate=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        "warning: data: 59 train examples truncated to fit data.max_length=60 (data.truncation='prompt_left');"
        " per client: [12, 16, 16, 15]",
        "warning: data: 6 train examples dropped: fewer than data.min_prompt_length=16 of their prompt tokens fit"
        " data.max_length=60 (set data.max_completion_length or raise data.max_length); per client: [1, 2, 2, 1]",
        "warning: data: 1 of 59 truncated train examples lost most of their prompt (kept under half its tokens;"
        " set data.max_completion_length or raise data.max_length); per client: [0, 1, 0, 0]",
        "federation: 4 clients, 66 training examples, per client min 16 / median 17 / max 17",
        GROUP_LINE,
    ]


@pytest.mark.parametrize("argv, env, expected", [([], "", False), (["--verbose"], "", True), ([], "1", True)])
def test_verbose_requested(monkeypatch, argv, env, expected):
    monkeypatch.setenv(console.VERBOSE_ENV, env)
    assert console.verbose_requested(argv) is expected


def test_a_lightning_record_prints_once_when_a_library_configured_the_root_logger():
    """opacus calls ``logging.basicConfig`` at import: before Lightning, that made its records print twice."""
    probe = (
        "import logging; logging.basicConfig()\n"
        "from lightning_fed import console; console.configure(verbose=True)\n"
        "import lightning.pytorch; console.filter_library_handlers()\n"
        "logging.getLogger('lightning.pytorch.utilities.rank_zero').info('resuming x: a -> b (allowed)')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800
    )
    assert proc.stderr.count("(allowed)") == 1, proc.stderr
