//! A consumer's effect for a batch of messages, and the one query that writes
//! it together with the batch's inbox rows.
//!
//! An effect is rows of one table, one row per message, behind the table's
//! unique key (`ON CONFLICT … DO NOTHING`). The consumer only says what the
//! rows are ([`Effect::row`]); this module writes them, so that a batch costs
//! one trip to the database whatever the consumer:
//!
//! ```text
//! effect: INSERT INTO <table> SELECT … FROM (VALUES <one row per message>)
//!         WHERE the message is not in the consumer's inbox yet
//!         ON CONFLICT <unique key> DO NOTHING
//! inbox:  INSERT INTO consumer_inbox VALUES <one row per message>
//!         ON CONFLICT DO NOTHING RETURNING message_id         → the messages that were new
//! ```
//!
//! SQLite runs the two as one query string, in that order, led by the group
//! commit's savepoint move; the effect skips the messages the inbox holds
//! already, and the batch's transaction is the database's one writer, so
//! nothing changes the inbox in between. PostgreSQL runs one statement: the
//! inbox insert and the effect are both data-modifying `WITH`s, the effect
//! joined to the ids the inbox insert returned. Either way the effect is
//! written exactly for the messages the inbox statement finds new: a message
//! already in the inbox (processed, or parked as a dead letter) gets none. Of
//! two instances racing on one message (PostgreSQL), the second's inbox row
//! waits on the first's (the unique key) and, once the first commits,
//! conflicts: not new, no effect, a duplicate.

use std::collections::HashSet;

use once_db::Dialect;
use once_domain::UnixMillis;
use sqlx::{Any, Row};

use crate::inbox::PROCESSED;
use crate::placeholders;

/// One bound value of an effect row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Int(i64),
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::Text(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Self::Text(s.to_owned())
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Self::Int(n)
    }
}

/// The rows a consumer writes for a batch of messages (see the module docs).
#[derive(Debug, Clone)]
pub struct Effect {
    table: &'static str,
    columns: &'static [&'static str],
    /// The conflict target: `(entry_type, source_payment_id)`.
    unique: &'static str,
    /// Each row's message id, then its values in `columns` order.
    rows: Vec<(String, Vec<Value>)>,
}

/// Which messages of the batch get their effect row.
#[derive(Debug, Clone, Copy)]
enum Only {
    /// Those the consumer's inbox does not hold (SQLite: the effect runs
    /// before the inbox insert, on the one writer's transaction).
    NotInInbox,
    /// Those the inbox insert of the same statement returned as new
    /// (PostgreSQL: `inbox`, a `WITH` of that statement). Not a `NOT EXISTS`
    /// over the table: with that, a batch of ~60 messages took 7–9 ms a
    /// statement in `pg_stat_statements` (two statements took ~1 ms), the
    /// planner free to join the whole inbox.
    NewInInbox,
    /// All (a redrive, which has just revived its inbox row).
    All,
}

type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

impl Effect {
    pub fn new(
        table: &'static str,
        columns: &'static [&'static str],
        unique: &'static str,
    ) -> Self {
        Self {
            table,
            columns,
            unique,
            rows: Vec::new(),
        }
    }

    /// The row of `message_id`'s effect: one value per column.
    pub fn row(&mut self, message_id: &str, values: Vec<Value>) {
        assert_eq!(
            values.len(),
            self.columns.len(),
            "{}: one value per column",
            self.table
        );
        self.rows.push((message_id.to_owned(), values));
    }

    /// Placeholders per row: the message id, then the values.
    fn width(&self) -> usize {
        1 + self.columns.len()
    }

    /// Where row `row`'s placeholders start; `$1` and `$2` are the consumer
    /// and the time.
    fn first_of(&self, row: usize) -> usize {
        3 + row * self.width()
    }

    /// The effect's statement, for the messages `only` lets through.
    fn insert(&self, only: Only) -> String {
        let rows: Vec<String> = (0..self.rows.len())
            .map(|r| format!("({})", placeholders::list(self.first_of(r), self.width())))
            .collect();
        // VALUES names its columns column1, column2 … on both databases;
        // column1 is the message id.
        let picked: Vec<String> = (2..=self.width()).map(|c| format!("column{c}")).collect();
        // SQLite needs a WHERE between a SELECT and its upsert clause.
        let only_new = match only {
            Only::NotInInbox => {
                "NOT EXISTS (SELECT 1 FROM consumer_inbox i \
                 WHERE i.consumer_name = $1 AND i.message_id = v.column1)"
            }
            Only::NewInInbox => "v.column1 IN (SELECT message_id FROM inbox)",
            Only::All => "true",
        };
        format!(
            "INSERT INTO {} ({}) SELECT {} FROM (VALUES {}) AS v WHERE {only_new} \
             ON CONFLICT {} DO NOTHING",
            self.table,
            self.columns.join(", "),
            picked.join(", "),
            rows.join(", "),
            self.unique
        )
    }

    /// The inbox statement: every message of the batch, processed now.
    fn inbox_rows(&self) -> String {
        let rows: Vec<String> = (0..self.rows.len())
            .map(|r| format!("($1, ${}, '{PROCESSED}', $2)", self.first_of(r)))
            .collect();
        format!(
            "INSERT INTO consumer_inbox (consumer_name, message_id, status, processed_at) VALUES {} \
             ON CONFLICT (consumer_name, message_id) DO NOTHING RETURNING message_id",
            rows.join(", ")
        )
    }

    fn bind<'q>(
        &'q self,
        mut query: AnyQuery<'q>,
        consumer: &'q str,
        now: UnixMillis,
    ) -> AnyQuery<'q> {
        query = query.bind(consumer).bind(now.0);
        for (message_id, values) in &self.rows {
            query = query.bind(message_id.as_str());
            for value in values {
                query = match value {
                    Value::Text(s) => query.bind(s.as_str()),
                    Value::Int(n) => query.bind(*n),
                };
            }
        }
        query
    }

    /// Writes the effect of the messages new to `consumer`'s inbox and
    /// their inbox rows, in one query behind `savepoint_move` (a group
    /// commit's, for a one-trip job: empty on PostgreSQL). Returns the
    /// message ids that were new; an id given twice is new once.
    pub async fn write_with_inbox(
        &self,
        conn: &mut sqlx::AnyConnection,
        dialect: Dialect,
        savepoint_move: &str,
        consumer: &str,
        now: UnixMillis,
    ) -> Result<HashSet<String>, sqlx::Error> {
        let inbox = self.inbox_rows();
        let sql = match dialect {
            Dialect::Sqlite => {
                let effect = self.insert(Only::NotInInbox);
                format!("{savepoint_move}{effect}; {inbox}")
            }
            Dialect::Postgres => {
                let effect = self.insert(Only::NewInInbox);
                format!(
                    "{savepoint_move}WITH inbox AS ({inbox}), effect AS ({effect}) \
                     SELECT message_id FROM inbox"
                )
            }
        };
        self.bind(sqlx::query(&sql), consumer, now)
            .fetch_all(conn)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect()
    }

    /// Writes the effect alone, whatever the inbox holds (a redrive, whose
    /// inbox row it has just revived in the same transaction).
    pub async fn write(
        &self,
        conn: &mut sqlx::AnyConnection,
        consumer: &str,
        now: UnixMillis,
    ) -> Result<(), sqlx::Error> {
        let sql = self.insert(Only::All);
        // `$1` and `$2` go unused; PostgreSQL knows their types from the
        // binds, SQLite does not mind.
        self.bind(sqlx::query(&sql), consumer, now)
            .execute(conn)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_rows() -> Effect {
        let mut effect = Effect::new("t", &["a", "b"], "(a)");
        effect.row("m1", vec!["x".into(), 1.into()]);
        effect.row("m2", vec!["y".into(), 2.into()]);
        effect
    }

    #[test]
    fn rows_number_their_placeholders_after_the_consumer_and_the_time() {
        let effect = two_rows();
        assert_eq!(
            effect.insert(Only::NotInInbox),
            "INSERT INTO t (a, b) SELECT column2, column3 FROM (VALUES ($3, $4, $5), ($6, $7, $8)) AS v \
             WHERE NOT EXISTS (SELECT 1 FROM consumer_inbox i WHERE i.consumer_name = $1 \
             AND i.message_id = v.column1) ON CONFLICT (a) DO NOTHING"
        );
        assert_eq!(
            effect.inbox_rows(),
            "INSERT INTO consumer_inbox (consumer_name, message_id, status, processed_at) VALUES \
             ($1, $3, 'PROCESSED', $2), ($1, $6, 'PROCESSED', $2) \
             ON CONFLICT (consumer_name, message_id) DO NOTHING RETURNING message_id"
        );
    }

    #[test]
    #[should_panic(expected = "one value per column")]
    fn a_row_has_a_value_per_column() {
        Effect::new("t", &["a", "b"], "(a)").row("m", vec![1.into()]);
    }
}
