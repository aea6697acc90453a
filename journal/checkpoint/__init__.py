"""Checkpoints: RFC 6962 Merkle trees over each session, C2SP signed-note checkpoints, a signed vault
index and witness cosignatures (docs/checkpoints.md). One module per concern:

- `merkle`: the tree, inclusion and consistency proofs;
- `note`: C2SP signed notes, Ed25519 keys in the note key text formats, cosignature/v1;
- `checkpoint`: the tlog-checkpoint body and `seals/<session>.checkpoint`;
- `vault_index`: the signed index of every sealed session;
- `sealer`: writing a round of checkpoints (and asking witnesses to cosign them);
- `audit`: what `broker verify` checks against checkpoints, the index and witnesses;
- `witness`: the tlog-witness server logic and its client;
- `proof_bundle`: one entry, its inclusion proof and the checkpoint, for a third party;
- `autoseal`: sealing while the broker records.
"""
