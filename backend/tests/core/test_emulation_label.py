# SPDX-License-Identifier: Apache-2.0
"""The before/after windows' label for a host whose CPU is emulated in software (the kernel lane's QEMU
guest): every time it measures is "under emulation, not a performance figure"."""

from app.domain.plan_views import emulated


def test_a_qemu_tcg_cpu_labels_every_time_as_emulation():
    label = emulated("QEMU TCG CPU version 2.5+")
    assert label is not None
    assert label.startswith("under emulation, not a performance figure")
    assert "QEMU TCG CPU version 2.5+" in label


def test_real_and_hardware_virtualized_cpus_carry_no_label():
    for cpu in ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "AMD EPYC 7B13", "QEMU Virtual CPU version 2.5+", ""):
        assert emulated(cpu) is None, cpu
