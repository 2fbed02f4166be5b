#!/usr/bin/env python3
"""Mutation check of the guarantees of issue 55 (claim 3 for PyTorch models, the adapter's checks)
and later ones (issue 57: the PyTorch engine agrees with fca's; issue 58: the precision of the
matrix products): each mutation reverts one fix in the source, runs the check that guards it, and must see that check
fail; the source is restored afterwards, whatever happens. A guarantee whose check still passes with
its fix reverted is reported MISSED.

    python3 scripts/mutation_check.py [--build build] [NAME-SUBSTRING ...]

Python mutations run the tests/external check scripts directly; C++ mutations rebuild fca and
fca_tests (incrementally) and run one GoogleTest filter. Run on a clean tree: it edits files in place
and restores them. Exit status 1 when any mutation is missed.
"""
import argparse
import dataclasses
import os
import subprocess
import sys
from typing import Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COUNTING = "python/fca_adapter/counting.py"
EXECUTION = "python/fca_adapter/execution.py"
PROTOCOL = "python/fca_adapter/protocol.py"


@dataclasses.dataclass
class M:
    what: str
    file: str
    old: str
    new: str
    python: Optional[Tuple[str, str]] = None   # (check script in tests/external, text of the check that must fail)
    gtest: Optional[str] = None                # GoogleTest filter that must fail
    rebuild: bool = False                      # C++: rebuild fca and fca_tests first


MUTATIONS = [
 M("in-place formula name", COUNTING, '''    if formula is None and packet.endswith("_"):''', '''    if False:''', python=("check_exec_unseen.py", "addmm_")),
 M("fused MHA formula", COUNTING, '''"_native_multi_head_attention": _native_mha, ''', '', python=("check_exec_unseen.py", "MultiheadAttention")),
 M("addbmm/addr/_trilinear/_cdist formulas", COUNTING, '''"addbmm": _addbmm, "addr": _addr, "_trilinear": _trilinear, "_cdist_forward": _cdist,''', '', python=("check_exec_unseen.py", "addbmm")),
 M("harmless ops in zero_ops", COUNTING, '''    constant_pad_nd view_as_complex view_as_real _unique2 unique_consecutive searchsorted bucketize index_fill
    bincount unsafe_split unsafe_split_with_sizes unsafe_chunk polar complex real imag''', '', python=("check_exec_unseen.py", "padding")),
 M("unseen parameters", COUNTING, '''            if key not in self.in_product and key not in self.read:''', '''            if False:''', python=("check_exec_unseen.py", "numpy")),
 M("multiply-then-sum", COUNTING, '''                self.multiply_then_sum[key] = self.multiply_then_sum.get(key, 0) + 1''', '''                pass''', python=("check_exec_unseen.py", "multiply-then-sum")),
 M("rows from the matching argument", COUNTING, '''            if a.dim() == outputs[0].dim() and tuple(a.shape[:-1]) == lead:''', '''            if True:''', python=("check_exec_unseen.py", "rows of b(mask")),
 M("root distinct from outside", COUNTING, '''OUTSIDE = "(outside every module)"''', '''OUTSIDE = ""''', python=("check_exec_unseen.py", "root's own product")),
 M("unit warnings", COUNTING, '''            if unit_flops > 0 and rows == 0:''', '''            if False:''', python=("check_exec_unseen.py", "0 rows is reported")),
 M("nested units refused", EXECUTION, '''        if nested:''', '''        if False:''', python=("check_exec_unseen.py", "nested unit")),
 M("CUDA stream", EXECUTION, '''        start.record(stream)''', '''        start.record()''', python=("check_exec_counting.py", "CUDA timing")),
 M("run() timed", PROTOCOL, '''    def exec_forward(self, ids: torch.Tensor, handed) -> torch.Tensor:
        return self.run(ids, handed)''', '''    def exec_forward(self, ids: torch.Tensor, handed) -> torch.Tensor:
        return self.forward(ids, handed)[0]''', python=("check_exec_counting.py", "hand-written")),

 M("replay controller counted by any route", "python/fca_adapter/hooks.py", '''            with self._class_forwards_counted():
                yield''', '''            yield''', gtest="External.HookedModelsOfThirdPartyStylesAreAuditedAsTheyAre", rebuild=False),
 M("plain live pass with hooks detached", "python/fca_adapter/hooks.py", '''        with self.exec_hooks_detached():
            return self._run(ids).to(torch.float32).cpu()''', '''        return self.forward(ids, None)[0]''', gtest="External.HookedModelsOfThirdPartyStylesAreAuditedAsTheyAre", rebuild=False),
 M("reference without a unit kind", "python/fca_adapter/execution.py", '''ref_units = units_of(ref_model, adapter.executed, allow_missing=True)''', '''ref_units = units_of(ref_model, adapter.executed)''', gtest="ExternalExec.AnMoeIsMeasuredAgainstADenseReferenceWithoutExperts", rebuild=False),
 M("FeatureGate statistics inside the controller", "examples/gated_adapter.py", '''                g = self.controller(l, B, T, (s, logp, prev_logp, causal, upd, h))''', '''                stats = (s, logp, prev_logp, causal, upd, h)
                if self.gate == "featuregate":
                    phi = features(*stats)
                g = self.controller(l, B, T, stats)''', gtest="ExternalExec.FeatureGateCountsAgreeWithNativeAndTheReportShowsClaim3", rebuild=False),
 M("no saving from a partial count", "src/exec/exec.cpp", '''    if (!m->value("fully_counted", true)) partial''', '''    if (false) partial''', gtest="ExecExternal.NoSavingIsClaimedFromAPartialCount", rebuild=True),
 M("fully_counted computed", "src/exec/external_exec.cpp", '''  j["fully_counted"] = j["uncounted_ops"].empty() && j["unseen_work"].empty();''', '''  j["fully_counted"] = true;''', gtest="ExecExternal.CountsBecomeTheModeEntry", rebuild=True),
 M("exact computed", "src/exec/external_exec.cpp", '''      entry["exact"] = first_differing == digests.size();''', '''      entry["exact"] = true;''', gtest="ExternalExec.AnInexactReplayIsRefused", rebuild=True),
 M("errors name the adapter", "src/models/external/auditable.cpp", '''  connection_->name_adapter(model_.name);''', '''''', gtest="ExternalExec.AnInexactReplayIsRefused", rebuild=True),
 M("run_live record 0", "src/models/external/auditable.cpp", '''{{"record", recording ? "1" : "0"}}''', '''{{"record", "1"}}''', gtest="External.HookedModelsOfThirdPartyStylesAreAuditedAsTheyAre", rebuild=True),
 M("probe on token subsets", "src/audit/replay_probe.cpp", '''      if (s.tokens < 2) {''', '''      if (true) {''', gtest="BrokenAdapter.ReplayHonouringOneTokenIsRefused", rebuild=True),
 M("aggregate compares definitions and hashes", "src/audit/aggregate.cpp", '''      "/model/static_profile",   "/model/structure_removed",     "/provenance/fca_version",''', '''''', gtest="AuditEndToEnd.AggregateAppliesCriteriaAndRefusesWhatDoesNotCombine", rebuild=True),
 M("--external-timeout range", "src/cli/cmd_exec.cpp", '''->check(number_in(kMinExternalTimeout, kMaxExternalTimeout))''', '''->check(positive_number)''', gtest="Cli.NumericFlagsNameTheirRangeInWords", rebuild=True),
 M("number_text", "src/models/exit/auditable.cpp", '''found " + number_text(value));''', '''found " + std::to_string(value));''', gtest="ExitAudit.EveryConditionReportsItsDepthAndCountedFlopsMatchingItsRecords", rebuild=True), M("probe per stream", "src/audit/replay_probe.cpp", '''    for (int st = 0; st < s.streams; ++st) {
      bool any = false;''', '''    groups.push_back({"layer " + std::to_string(l), l, -1, 0});
    for (int st = 0; st < 0; ++st) {
      bool any = false;''', gtest="AuditEndToEnd.AReplayThatUsesItsCoefficientsForOneStreamOnlyIsRefused", rebuild=True),
 M("family setting ranges", "src/train/train_family.cpp", '''  if (!s.range.contains(value.get<double>()))''', '''  if (false)''',
   gtest="TrainFamily.EveryRangedSettingRefusesValuesOutsideItsRangeNamingItself", rebuild=True),
 M("the API names the adapter, not the relay", "python/fca_adapter/api.py",
   '''        raise AuditError(message.replace(f"`{relay}`", f"adapter '{_adapter_name(adapter)}'"))''',
   '''        raise AuditError(message)''', gtest="ExternalExec.PythonApiMeasuresTheModelInProcess"),
 # Issue 57: fca_torch, the PyTorch engine, against fca's own engine.
 M("torch engine: AdamW's bias correction", "python/fca_torch/optim.py", '''bias1, bias2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t''',
   '''bias1, bias2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** (t + 1)''', gtest="TorchEngine.OneAdamWStepGivesTheSameWeights"),
 M("torch engine: fca's window stream", "python/fca_torch/data.py", '''rng = Rng(derive_seed(seed, step, k))''',
   '''rng = Rng(derive_seed(seed, step, k + 1))''', gtest="TorchEngine.OneAdamWStepGivesTheSameWeights"),
 M("torch engine: each rank its own micro-batches", "python/fca_torch/train.py", '''            k = ranks.rank * A + j''',
   '''            k = j''', gtest="TorchEngine.TwoGlooRanksAreOneProcessWithGradientAccumulationTwo"),
 M("torch engine: resume restores AdamW's moments", "python/fca_torch/train.py", '''            opt.v[name].copy_(state["adam.v." + name])''',
   '''            pass''', gtest="TorchEngine.AKilledRunResumesToTheWeightsOfAnUninterruptedOne"),
 M("torch engine: the tanh GELU", "python/fca_torch/gated.py", '''F.gelu(self.fc(m), approximate="tanh")''',
   '''F.gelu(self.fc(m))''', gtest="TorchEngine.NativeCheckpointsGiveTheSameLogitsAndAuditInPyTorch"),
 # Issue 58: the precision of the matrix products.
 M("a cache of the other precision refused", "src/audit/cache.cpp", '''  if (found.precision != precision)
    throw''', '''  if (false)
    throw''', gtest="PrecisionAudit.ACacheOfTheOtherPrecisionIsRefused", rebuild=True),
 M("bf16 audits batch-dependent", "src/audit/plan.cpp", '''  return model.batch_invariant() && matmul_precision() == MatmulPrecision::fp32;''',
   '''  return model.batch_invariant();''', gtest="PrecisionAudit.Bf16AuditsKeepTheirBatch", rebuild=True),
 M("bf16 rounding ties to even", "src/ops/simd.cpp", '''hn::Add(hn::Add(x, hn::Set(du, 0x7FFF)), hn::And(high, hn::Set(du, 1)))''',
   '''hn::Add(x, hn::Set(du, 0x8000))''', gtest="Precision.VectorRoundingIsTheScalarDefinitionOnEveryTarget", rebuild=True),
 M("bf16 weights rounded", "src/ops/onednn_matmul.cpp", '''    if (g.b_bf16 != nullptr) {
      b = g.b_bf16, ldb = g.trans_b ? g.K : g.N;''', '''    if (g.b_bf16 != nullptr) {
      b = g.B, ldb = g.trans_b ? g.K : g.N;''', gtest="PrecisionAudit.Bf16ReplaysExactlyAndStaysWithinItsBoundOfFp32", rebuild=True),
 M("oneDNN sees a dense C", "src/ops/onednn_matmul.cpp", '''  if (g.ldc != g.N) {
    c_dense.resize''', '''  if (false) {
    c_dense.resize''', gtest="Gemm.LinearEpiloguesAreBitwiseTheUnfusedLayers", rebuild=True),
 M("bf16 refused for an adapter's model", "src/cli/cmd_audit.cpp", '''    if (f.precision != "fp32")
      throw''', '''    if (false)
      throw''', gtest="Cli.PrecisionIsAFlagEveryResultRecords", rebuild=True),
 M("oneDNN scratchpad per thread", "src/ops/onednn_matmul.cpp", '''  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);''',
   '''''', gtest="Gemm.UnitsAThreadLeavesAreComputedByAnother", rebuild=True),
 M("oneDNN reads kept weights from their blocked copies", "src/ops/gemm.cpp",
   '''  g.b_blocked = active_packed_weights->onednn_blocked(g.B, g.N, g.K);''', '''''',
   gtest="Gemm.OnednnReadsKeptWeightsBlockedWithThePlainLayoutsBits", rebuild=True),
 M("bf16 MLP applies its GELU", "src/ops/gemm.cpp", '''  fc.post_op = OnednnPostOp::gelu_tanh;''', '''''',
   gtest="Gemm.MlpForwardIsItsTwoLayersAndKeepsItsHiddenActivationInBf16", rebuild=True),
 M("bf16 MLP adds the fc bias", "src/ops/gemm.cpp", '''  OnednnGemm fc{false, true, N, F, D, 1.0f, x, D, fc_weight, D, false, nullptr, F, fc_bias};''',
   '''  OnednnGemm fc{false, true, N, F, D, 1.0f, x, D, fc_weight, D, false, nullptr, F, ((void)fc_bias, nullptr)};''',
   gtest="Gemm.MlpForwardIsItsTwoLayersAndKeepsItsHiddenActivationInBf16", rebuild=True),
 M("each expert slice is a kept weight", "src/models/family_auditable.h", '''    if (t.shape.size() == 3)
      for''', '''    if (false)
      for''', gtest="Gemm.KeptWeightsAreEveryMatrixAndEachExpertSlice", rebuild=True),
]


def failed(m: M, build: str) -> Tuple[bool, str]:
    """Whether m's check fails on the mutated tree, and a line saying how."""
    if m.python is not None:
        script, expect = m.python
        r = subprocess.run([sys.executable, os.path.join("tests/external", script)], capture_output=True, text=True)
        lines = [l for l in r.stdout.splitlines() if l.startswith("FAILED ")]
        return r.returncode != 0 and any(expect in l for l in lines), (lines[0][:100] if lines else r.stderr[-160:])
    if m.rebuild:
        b = subprocess.run(["cmake", "--build", build, "--target", "fca", "fca_tests", "-j", "2"], capture_output=True, text=True)
        if b.returncode != 0:
            return False, "the mutated tree does not build: " + b.stdout[-300:]
    r = subprocess.run([os.path.join(build, "fca_tests"), "--gtest_filter=" + m.gtest], capture_output=True, text=True, cwd=build)
    return r.returncode != 0, m.gtest


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("names", nargs="*", help="run only the mutations whose name contains one of these")
    args = parser.parse_args()
    os.chdir(ROOT)
    build = os.path.abspath(args.build)
    missed, rebuilt = 0, False
    for m in MUTATIONS:
        if args.names and not any(n in m.what for n in args.names):
            continue
        source = open(m.file).read()
        if m.old not in source:
            print(f"STALE  {m.what}: {m.file} no longer holds the fixed code; update this table")
            missed += 1
            continue
        open(m.file, "w").write(source.replace(m.old, m.new))
        try:
            caught, how = failed(m, build)
            rebuilt = rebuilt or m.rebuild
        finally:
            open(m.file, "w").write(source)
        missed += not caught
        print(("CAUGHT " if caught else "MISSED ") + m.what + ": " + how, flush=True)
    if rebuilt:
        subprocess.run(["cmake", "--build", build, "--target", "fca", "fca_tests", "-j", "2"], capture_output=True)
    print(f"{missed} missed" if missed else "every mutation was caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
