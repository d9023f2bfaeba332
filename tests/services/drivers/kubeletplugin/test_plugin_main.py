"""``plugin_main``, the example drivers' ``__main__``: a bad option is a usage error (exit 2, the
message on stderr) before anything connects."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from draflow.services.drivers.gpu_example.node.__main__ import main as gpu_main
from draflow.services.drivers.nvidia_sim.node.__main__ import main as nvidia_main


@pytest.mark.parametrize(
    ("main", "argv", "message"),
    [
        (gpu_main, ["--node", "n", "--gpus", "0"], "error: --gpus: must be at least 1\n"),
        (nvidia_main, ["--node", "n", "--gpus", "2", "--mig-gpus", "3"], "more than the node's 2 GPUs"),
        (nvidia_main, ["--gpus", "2"], "the following arguments are required: --node"),
    ],
)
def test_a_bad_option_is_a_usage_error(
    main: Callable[[Sequence[str]], int], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m draflow.services.drivers.") and message in err
