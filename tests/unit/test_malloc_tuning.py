"""Specification of memd's glibc malloc settings (memd.malloc_tuning): a fixed mmap threshold, a fixed trim
threshold and two arenas at start, unless the operator's environment already says otherwise. Their effect on RSS
is measured by the soak (torture/README.md), on latency by figure 10b (docs/benchmarks.md), not here."""

from __future__ import annotations

import platform

import pytest

from memd import malloc_tuning


class Mallopt:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def __call__(self, option: int, value: int) -> int:
        self.calls.append((option, value))
        return self.answer


def test_fixed_mmap_and_trim_thresholds_and_two_arenas_are_set() -> None:
    mallopt = Mallopt()

    status = malloc_tuning.tune({}, mallopt)

    assert mallopt.calls == [(-3, 256 << 10), (-1, 4 << 20), (-8, 2)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_ARENA_MAX
    assert status == {"applied": True, "mmap_threshold": 262144, "trim_threshold": 4194304, "arena_max": 2}


@pytest.mark.parametrize(
    "name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES"]
)
def test_the_operators_environment_wins(name: str) -> None:
    mallopt = Mallopt()

    status = malloc_tuning.tune({name: "65536"}, mallopt)

    assert mallopt.calls == []
    assert status == {"applied": False, "reason": f"set in the environment ({name})"}


def test_a_refused_setting_is_reported_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    status = malloc_tuning.tune({}, Mallopt(answer=0))

    assert status == {"applied": False, "reason": "mallopt refused M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_ARENA_MAX"}
    assert "refused" in caplog.text


def test_the_settings_glibc_took_are_kept_and_the_refused_one_is_named() -> None:
    class RefusesTrim(Mallopt):
        def __call__(self, option: int, value: int) -> int:
            super().__call__(option, value)
            return 0 if option == -1 else 1

    mallopt = RefusesTrim()

    status = malloc_tuning.tune({}, mallopt)

    assert [option for option, _ in mallopt.calls] == [-3, -1, -8]  # every setting was still tried
    assert status == {"applied": False, "reason": "mallopt refused M_TRIM_THRESHOLD"}


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_takes_the_settings() -> None:
    assert malloc_tuning.tune({})["applied"] is True
