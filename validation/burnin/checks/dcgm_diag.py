"""dcgm_diag: NVIDIA DCGM's own diagnostics (`dcgmi diag -r N -j`) where DCGM is installed.

Run level 2 (deployment, PCIe, GPU memory) at the standard level and 3 (adds the diagnostic,
targeted stress, power and memory bandwidth tests) at extended. Each DCGM test's verdict becomes
a finding: a Fail fails the node, a Warn or Skip is noted. A run that passed no GPU test (only the
deployment checks, which test the software), or that exited non-zero with no test failed or warned
(it stopped early), is an error: DCGM measured nothing whole. Where dcgmi is not installed the
check is skipped with that reason; DCGM is an operator's choice, not a requirement of the burn-in.

Raw: {"run_level", "argv", "version", "rc", "output", "stderr"}.
"""

from __future__ import annotations

from fleet.catalog import Sku
from validation.burnin.backends.base import Backend, Unsupported
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, error, judge
from validation.burnin.parsers.dcgm import TestVerdict, parse_diag
from validation.burnin.registry import Check, Raw, register

# Leave the worker time to record the outcome before the check's own timeout.
_RUN_SHARE = 0.9
# DCGM's deployment tests check the software (denylist, driver, persistence mode, environment):
# passing them alone says nothing of the GPUs, which run level 2 and up test.
SOFTWARE_ONLY = ("deployment",)


@register
class DcgmDiag(Check):
    name = "dcgm_diag"
    description = "NVIDIA DCGM diagnostics (dcgmi diag) where DCGM is installed"
    order = 25
    timeouts = {"standard": 1200.0, "extended": 3600.0}
    level_params = {"standard": {"run_level": 2}, "extended": {"run_level": 3}}

    def applies_to(self, sku: Sku) -> str | None:
        if sku.accelerator.vendor != "nvidia" or sku.accelerator.kind != "gpu":
            return f"{sku.sku} has no NVIDIA GPU: DCGM diagnostics do not apply"
        return None

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        run = getattr(backend, "dcgm_diag", None)
        if run is None:
            raise Unsupported(f"the {backend.name} backend cannot run DCGM diagnostics")
        level = int(self.params(ctx)["run_level"])
        result: Raw = run(level, self.timeouts[ctx.level] * _RUN_SHARE)
        return result

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        rc = raw.get("rc")
        try:
            report = parse_diag(str(raw.get("output") or ""))
        except ValueError as exc:
            stderr = str(raw.get("stderr") or "").strip()[-300:]
            return error(
                f"dcgmi diag -r {raw.get('run_level')} exited {rc}: {exc}" + (f"; {stderr}" if stderr else "")
            )
        failed = report.with_status("fail")
        run_level = raw.get("run_level")
        gpu_passed = [t for t in report.with_status("pass") if t.category.lower() not in SOFTWARE_ONLY]
        if not failed and not (gpu_passed if _tests_gpus(run_level) else report.with_status("pass")):
            # Every GPU test skipped, or none reported (a run stopped after the deployment checks):
            # DCGM measured no GPU, and nothing is no pass.
            return error(
                f"dcgmi diag -r {run_level} passed no test of the GPUs ({len(report.tests)} reported, "
                f"{len(report.with_status('pass'))} deployment checks passed)"
            )
        if rc not in (0, None) and not failed and not report.with_status("warn"):
            # dcgmi exits non-zero when a test fails; with none failed or warned, the run stopped
            # early (an abort reports only the tests it reached).
            stderr = str(raw.get("stderr") or "").strip()[-300:]
            return error(
                f"dcgmi diag -r {run_level} exited {rc} with no failed test: the run stopped early"
                + (f"; {stderr}" if stderr else "")
            )
        faults = [_finding(t) for t in failed]
        notes = [_finding(t) for t in report.with_status("warn") + report.with_status("skip")]
        passed = len(report.with_status("pass"))
        notes.append(f"dcgmi diag -r {raw.get('run_level')}: {passed} of {len(report.tests)} tests passed")
        versions = {"dcgm": str(raw["version"])} if raw.get("version") else None
        return judge(
            ctx, {"dcgm_diag_failed_tests": float(len(failed))}, faults=faults, notes=notes, versions=versions
        )


def _tests_gpus(run_level: object) -> bool:
    """Run level 1 is the deployment checks alone; 2 and up add the tests of the GPUs."""
    return not isinstance(run_level, int) or run_level >= 2


def _finding(t: TestVerdict) -> str:
    where = f" on GPU {t.gpus}" if t.gpus else ""
    detail = f": {t.detail[:200]}" if t.detail else ""
    return f"DCGM {t.category} / {t.name}: {t.status}{where}{detail}"
