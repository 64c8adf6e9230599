//! The tail split of `report --tail` and `--first` (being written).
