"""A MODEL of Trainium (trn1) time per call from the XLA lane's measured counts.

    modelled time = graph executions x dispatch cost
                  + graph compilations x compile cost
                  + compulsory bytes moved / HBM bandwidth

It is not a measurement: no Trainium was used.  The counts come from the XLA
lane (torch-xla on PJRT CPU traces and cuts graphs as torch-neuronx does); the
costs are published trn1 figures.  Compute time is not modelled (a lower bound
for the dense decompositions).
"""

MODEL = {
    "formula": "executions * dispatch_s + compilations * compile_s + bytes_moved / hbm_Bps",
    "dispatch_s": {"low": 1.3e-3, "high": 2.5e-3},
    "compile_s": {"low": 1.6, "high": 13.0},
    "hbm_Bps": 820e9,
    "sources": ("trn1 figures as published on the trnsci benchmark pages: about 1.3-2.5 ms "
                "per NKI kernel dispatch, 1.6-13 s per cold neuronx-cc compile; 820 GB/s HBM "
                "per trn1 Trainium chip (AWS trn1 specifications)."),
    "bytes_moved": ("compulsory traffic of one call, counted per workload: SpMV/SpMM data + "
                    "indices + indptr + X + Y; solvers: iterations (SciPy's count) x (one "
                    "SpMV + vector passes); dense: input read + outputs written once"),
    "not_modelled": "arithmetic time, host-device transfer time, Python overhead",
}


def modelled_seconds(counts, bytes_moved):
    """{'low': s, 'high': s} for one call with the given XLA counts."""
    moved = (bytes_moved or 0) / MODEL["hbm_Bps"]
    return {bound: counts["executions"] * MODEL["dispatch_s"][bound]
            + counts["compilations"] * MODEL["compile_s"][bound] + moved
            for bound in ("low", "high")}


def add_model(row):
    """Attach the cold and warm modelled Trainium times to a row's XLA lane."""
    entry = row["lanes"].get("trn_xla")
    if not entry or "xla" not in entry:
        return
    entry["model_s"] = {phase: modelled_seconds(counts, row.get("bytes_moved"))
                        for phase, counts in entry["xla"].items()}
