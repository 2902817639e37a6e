"""Every selected instance compiles for sm_90 through NVRTC (no GPU needed), with no
register spills and no local-memory stack frame."""
from normgen.compile import compile_file

from .conftest import source_dir


def test_instance_compiles_without_spills(spec):
    compiled = compile_file(source_dir() / spec.file_name, arch="sm_90")
    assert compiled.cubin.startswith(b"\x7fELF")
    res = compiled.resources
    assert res["registers"] > 0, compiled.log  # the ptxas report was read
    assert res["spill_stores"] == res["spill_loads"] == 0, compiled.log
    assert res["stack"] == 0, compiled.log
    assert "warning" not in compiled.log, compiled.log
