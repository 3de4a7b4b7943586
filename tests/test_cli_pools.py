"""``diffcost plan serve --qps`` (diffcost.cli._pools): bad rates are input errors naming the
flag, and the p99 limits are accepted with a rate as with ``--objective goodput``."""

import pytest
from typer.testing import CliRunner

from diffcost.cli import app

runner = CliRunner()


@pytest.mark.parametrize("rate", ["0", "-3", "nan"])
def test_a_rate_that_offers_no_load_is_an_input_error(rate):
    result = runner.invoke(app, ["plan", "serve", "--qps", rate, "--ttft-p99-ms", "500"])
    assert result.exit_code == 2
    assert "--qps: must be a positive rate" in result.output
    assert "p99 limit under load applies" not in result.output  # --qps takes the p99 limits


def test_p99_limits_without_a_rate_or_goodput_are_still_refused():
    result = runner.invoke(app, ["plan", "serve", "--ttft-p99-ms", "500"])
    assert result.exit_code == 2
    assert "applies to --objective goodput or --qps only" in result.output
