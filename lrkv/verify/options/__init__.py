"""A case's per-level options (DESIGN §3): each a small frozen dataclass that owns its JSON
keys (`KEYS`: flat key -> attribute), its validation against the case core (`check`), its id
flags and its report shapes. `lrkv.verify.case.OPTIONS` names them; a case holds None for an
option whose keys all keep their defaults."""
