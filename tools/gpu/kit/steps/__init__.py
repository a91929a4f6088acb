"""The kit's steps, in the order they run: each module has NAME, LIMIT_S (seconds before --timeout-scale)
and run(kit, record, deadline) -> (status, reason)."""
from . import bench, conformance, cosmoflow, deepcam, env, layers, pipeline, profile, resume, tests


ORDER = [env, tests, conformance, cosmoflow, deepcam, resume, pipeline, bench, layers, profile]
STEPS = [m.NAME for m in ORDER]
# Run when --only names them: bench, last of the default steps, lets torch.compile take the time left.
ON_REQUEST = ["layers", "profile"]
DEFAULT_STEPS = [s for s in STEPS if s not in ON_REQUEST]
BY_NAME = {m.NAME: m for m in ORDER}
