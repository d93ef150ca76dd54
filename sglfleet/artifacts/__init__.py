"""What a run builds, pins and moves: stacks and their locks, the wheelhouse, pinned models, upstream files, the patch engine, the fan-out, temporary names."""
