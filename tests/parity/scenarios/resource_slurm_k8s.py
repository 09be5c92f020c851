"""The resource under SLURM and Kubernetes variables, with the W&B fields and a deployment environment."""
import os

os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="default", NEMO_LENS_RUN_ID="parity-run",
                  SLURM_JOB_ID="4242", SLURM_JOB_NAME="gpt", SLURM_NODELIST="node[1-2]", SLURM_NNODES="2",
                  SLURM_NTASKS="16", SLURM_PARTITION="batch", SLURM_CLUSTER_NAME="eos",
                  KUBERNETES_SERVICE_HOST="10.0.0.1", K8S_NAMESPACE="ml", K8S_POD_NAME="pod-7", K8S_NODE_NAME="n1",
                  WANDB_ENTITY="team", WANDB_PROJECT="gpt", DEPLOYMENT_ENV="prod", CUDA_VISIBLE_DEVICES="0,1")

from nemo.lens import NemoLensConfig, setup_telemetry  # noqa: E402
from nemo.lens.helpers import span_cm  # noqa: E402

handle = setup_telemetry(NemoLensConfig.from_env(), rank=3, world_size=4, resource_attributes={"dl.custom": 5})
with span_cm("one"):
    pass
handle.shutdown()
