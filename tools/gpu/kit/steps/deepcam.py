"""Step 4 deepcam: the DeepCAM mini to its target on cuda in fp32 and bf16; the official checker."""
from .cosmoflow import to_target


NAME = "deepcam"
LIMIT_S = 80


def run(kit, record, deadline):
    missing = kit.need_cuda_backend() or (None if kit.has_plugin("workload-deepcam") else
                                           "no deepcam workload in the bundle (HDF5 was not found for its tree)")
    if missing:
        return "SKIP", missing
    # The ruleset wants the full dataset's sizes logged (121266 and 15158 samples): a mini's log is
    # accepted when those two checks are all the checker fails.
    return to_target(kit, record, deadline, "deepcam", "IoU", mini_dataset=True)
