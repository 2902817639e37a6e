"""CPU: scripts/ptx_compare.py's PTX normalization on tiny hand-written PTX (no NVRTC): a
renamed function-scope static compares equal, a changed instruction or a swapped
declaration order does not, and extern "C" entry names are kept."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    name = "normgen_script_ptx_compare"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "ptx_compare.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


normalize = _script().normalize

# A kernel with two __shared__ statics of the function `two_pass` ...
SHIFT = "_ZZN7normgen8two_passIN12_GLOBAL__N_16TraitsEEEvRKNS_6ParamsEE8sh_shift"
STATS = "_ZZN7normgen8two_passIN12_GLOBAL__N_16TraitsEEEvRKNS_6ParamsEE8sh_stats"
# ... and the same statics once the code moved into `reduce_row`.
SHIFT2 = "_ZZN7normgen10reduce_rowIN12_GLOBAL__N_16TraitsEEEvRKNS_6ParamsEE8sh_shift"
STATS2 = "_ZZN7normgen10reduce_rowIN12_GLOBAL__N_16TraitsEEEvRKNS_6ParamsEE8sh_stats"


def ptx(shift, stats, op="add.f32", banner="CL-1", first=None):
    decls = [f"\t.shared .align 4 .b8 {shift}[144];", f"\t.shared .align 4 .b8 {stats}[288];"]
    if first == "stats":
        decls.reverse()
    return "\n".join([
        "//", f"// Compiler Build ID: {banner}", "//", "",
        ".version 9.5", ".target sm_90", ".address_size 64", "",
        f"\t// {shift} has been demoted",
        "\t// .globl\tnormgen_kernel",
        ".visible .entry normgen_kernel(",
        "\t.param .align 8 .b8 normgen_kernel_param_0[160]",
        ")", "{",
        *decls,
        "\t.reg .f32 \t%f<4>;", "",
        f"\tmov.u32 \t%r1, {shift};",
        f"\tmov.u32 \t%r2, {stats};",
        f"\t{op} \t%f3, %f1, %f2;",
        "\tret;", "}", "",
    ])


def test_renamed_shared_variable_is_equal():
    a, b = ptx(SHIFT, STATS), ptx(SHIFT2, STATS2, banner="CL-2")
    assert a != b
    assert normalize(a) == normalize(b)
    assert "S0[144]" in normalize(a) and "S1[288]" in normalize(a)


def test_changed_instruction_differs():
    assert normalize(ptx(SHIFT, STATS)) != normalize(ptx(SHIFT2, STATS2, op="sub.f32"))


def test_swapped_declaration_order_differs():
    assert normalize(ptx(SHIFT, STATS)) != normalize(ptx(SHIFT, STATS, first="stats"))


def test_entry_names_header_and_params_kept():
    text = normalize(ptx(SHIFT, STATS))
    assert "normgen_kernel_param_0" in text and ".entry normgen_kernel(" in text
    assert ".version 9.5" in text and ".target sm_90" in text
    assert "//" not in text and "\n\n" not in text
    # a device function's parameters keep their suffix on the function's canonical name
    func = "_ZN7normgen3fooEf"
    assert normalize(f".func {func}(\n\t.param .b32 {func}_param_0\n)") == \
        ".func S0(\n\t.param .b32 S0_param_0\n)\n"


def test_unreferenced_data_is_dropped_and_referenced_data_kept():
    """A traits' static constexpr members are emitted as data nothing reads: their number and
    order follow the headers, not the code. Data an instruction reads stays, in order."""
    unused = ".global .align 4 .u32 _ZN12_GLOBAL__N_16Traits4kVecE = 8;"
    other = ".global .align 1 .u8 _ZN7normgen13SharedColumnsIN12_GLOBAL__N_16TraitsELb0EE7kSharedE;"
    read = ".global .align 4 .b8 _ZN7normgen4QMaxIaE5valueE[4] = {0, 0, 254, 66};"
    base = ptx(SHIFT, STATS)
    with_data = base.replace(".address_size 64", f".address_size 64\n{unused}\n{other}")
    assert normalize(with_data) == normalize(base)
    used = base.replace(".address_size 64", f".address_size 64\n{read}").replace(
        "ret;", "ld.global.f32 %f1, [_ZN7normgen4QMaxIaE5valueE];\n\tret;")
    assert normalize(used) != normalize(base.replace("ret;", "ld.global.f32 %f1, [X];\n\tret;"))
    assert "S0[4] = {0, 0, 254, 66};" in normalize(used)


def test_registers_and_labels_renumbered_within_a_function():
    """The same instructions over other virtual register numbers and labels compare equal;
    another data flow over the same registers does not."""
    a = ptx(SHIFT, STATS).replace("\t.reg .f32 \t%f<4>;", "\t.reg .f32 \t%f<4>;\n\t.reg .b32 \t%r<3>;")
    b = a.replace("%f1", "%f7").replace("%f2", "%f9").replace("%f3", "%f8").replace("%f<4>", "%f<10>")
    b = b.replace("%r1", "%r5").replace("%r2", "%r4")
    assert a != b
    assert normalize(a) == normalize(b)
    defined = a.replace("\tadd.f32", "\tmov.f32 \t%f1, 0f3F800000;\n\tmov.f32 \t%f2, 0f40000000;\n\tsub.f32")
    swapped = defined.replace("%f3, %f1, %f2", "%f3, %f2, %f1")  # 2 - 1 instead of 1 - 2
    assert normalize(swapped) != normalize(defined)
    labelled = a.replace("\tret;", "$L__BB0_3:\n\tbra.uni \t$L__BB0_3;\n\tret;")
    relabelled = labelled.replace("$L__BB0_3", "$L__BB0_7")
    assert normalize(labelled) == normalize(relabelled)
