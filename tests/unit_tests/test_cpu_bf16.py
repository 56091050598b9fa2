"""bf16 autocast is on by default only where the CPU computes bf16 in hardware (``--bf16 auto``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from training.trainers.common import cpu_has_fast_bf16  # noqa: E402

AMD = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
INTEL_AMX = "flags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n"
OLD = "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
ARM = "Features\t: fp asimd bf16 i8mm\n"


@pytest.mark.parametrize(("cpuinfo", "fast"), [(AMD, True), (INTEL_AMX, True), (OLD, False), (ARM, True), ("", False)])
def test_bf16_is_chosen_by_the_cpus_flags(cpuinfo, fast):
    assert cpu_has_fast_bf16(cpuinfo) is fast
