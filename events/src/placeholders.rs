//! Numbered placeholders (`$1, $2 …`) for statements whose number of rows
//! is known only at run time: `IN (…)` lists and multi-row `VALUES`, which
//! let a batch of rows cost one statement instead of one each.

/// `$first, $first+1, …`: `count` placeholders for an `IN (…)` list.
pub fn list(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `($1, …, $columns), (…)`: `rows` rows of `columns` placeholders each, for
/// a multi-row `VALUES`.
pub fn rows(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|row| format!("({})", list(1 + row * columns, columns)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_run_on_across_rows() {
        assert_eq!(list(2, 3), "$2, $3, $4");
        assert_eq!(rows(2, 3), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(rows(1, 1), "($1)");
    }
}
