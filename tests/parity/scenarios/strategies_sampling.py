"""Which ranks export under each built-in strategy (8 ranks, 4 a node), as each strategy function answers and as
setup_telemetry decides, and what RankAwareSampler decides for each rank at three rates."""
import os

from capture import note
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.sampling import RankAwareSampler
from nemo.lens.strategies import get_export_strategy

WORLD = 8
config = NemoLensConfig(enabled=True, export_rank=2, export_sample_rate=0.5, metrics_enabled=False)
for name in ("all_ranks", "single_rank", "sampled", "first_rank_per_node"):
    answers = []
    for rank in range(WORLD):
        os.environ["LOCAL_RANK"] = str(rank % 4)
        answers.append(bool(get_export_strategy(name)(config, rank, WORLD)))
    note(f"{name}: ranks that export", [rank for rank, yes in enumerate(answers) if yes])

os.environ["LOCAL_RANK"] = "1"
for name, rank in (("single_rank", 2), ("single_rank", 7), ("first_rank_per_node", 5), ("sampled", 3)):
    config = NemoLensConfig(enabled=True, export_strategy=name, export_rank=2, export_sample_rate=0.5,
                            metrics_enabled=False)
    handle = setup_telemetry(config, rank=rank, world_size=WORLD, _allow_reinit=True)
    note(f"setup {name} on rank {rank}: exporting", handle.is_exporting)
    handle.shutdown()

for rate in (0.0, 0.3, 1.0):
    decisions = [RankAwareSampler(rank, WORLD, rate).should_sample(None, 1, "s").decision.name for rank in range(WORLD)]
    note(f"RankAwareSampler at {rate}", decisions)
