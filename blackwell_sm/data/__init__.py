"""Training data on disk: the token shard format (`shards`) and `bsm data prepare` (`prepare`).

Shared by the client and the container; numpy (and optionally `tokenizers`) only, never torch.
"""
