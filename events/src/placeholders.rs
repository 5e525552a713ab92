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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_run_on_from_the_first() {
        assert_eq!(list(2, 3), "$2, $3, $4");
    }
}
