//! The model of the update oracles (tests/update_oracle.rs): two tables
//! with primary keys (`accounts`, `owners`) and an append-only stream of
//! `events`, changed by random statements whose meaning is written here
//! independently of weir; and which of them a view makes fail.

use std::collections::BTreeMap;

use super::Lcg;

/// A row of `accounts`: owner and balance (id is the key).
pub type Account = (Option<i64>, Option<i64>);

/// An event: id, account, owner, and the owner's region when it came
/// (None: no such owner then), as a lookup join meets it.
pub type Event = (i64, i64, i64, Option<Option<String>>);

/// What the tables should hold.
#[derive(Default, Clone)]
pub struct Model {
    pub accounts: BTreeMap<i64, Account>,
    pub owners: BTreeMap<i64, Option<String>>,
    pub events: Vec<Event>,
}

/// The `fragile` view divides by `balance % FRAGILE_MODULUS - FRAGILE_REMAINDER`,
/// so a balance of 3, 10, 17, … fails the write that makes it (about one
/// statement in eight).
pub const FRAGILE_MODULUS: i64 = 7;
pub const FRAGILE_REMAINDER: i64 = 3;

impl Model {
    /// Whether the `fragile_events` view (`10 / (account % 4 - 3)`) fails
    /// on these events.
    pub fn trips_fragile_events(&self) -> bool {
        self.events
            .iter()
            .any(|(_, account, _, _)| account % 4 == 3)
    }

    /// Whether the `fragile` view fails on these accounts (`%` takes the
    /// sign of the balance in SQL as in Rust).
    pub fn trips_fragile(&self) -> bool {
        self.accounts
            .values()
            .any(|(_, balance)| balance.is_some_and(|b| b % FRAGILE_MODULUS == FRAGILE_REMAINDER))
    }
}

pub fn nullable(value: Option<i64>) -> String {
    value.map_or("NULL".to_string(), |v| v.to_string())
}

fn maybe(random: &mut Lcg, bound: u64) -> Option<i64> {
    match random.below(bound + 1) {
        0 => None,
        n => Some(n as i64 - 1),
    }
}

/// What a random statement does.
pub enum Outcome {
    /// It changes the tables to this.
    Applied(Model),
    /// It fails with this SQLSTATE and changes nothing.
    Fails(&'static str),
}

/// A random statement and what it does to `model`; `step` numbers it
/// (events are a second apart).
pub fn statement(random: &mut Lcg, model: &Model, step: usize) -> (String, Outcome) {
    let mut next = model.clone();
    let key = random.below(12) as i64;
    let sql = match random.below(12) {
        0 | 1 => {
            let (owner, balance) = (maybe(random, 5), maybe(random, 9));
            let sql = format!(
                "INSERT INTO accounts VALUES ({key}, {}, {}) ON CONFLICT (id) DO UPDATE \
                 SET balance = accounts.balance + excluded.balance, owner = excluded.owner",
                nullable(owner),
                nullable(balance)
            );
            let row = match model.accounts.get(&key) {
                Some((_, old)) => (owner, old.zip(balance).map(|(a, b)| a + b)),
                None => (owner, balance),
            };
            next.accounts.insert(key, row);
            sql
        }
        2 => {
            let other = random.below(12) as i64;
            let (owner, balance) = (maybe(random, 5), maybe(random, 9));
            for id in [key, other] {
                next.accounts.entry(id).or_insert((owner, balance));
            }
            format!(
                "INSERT INTO accounts VALUES ({key}, {o}, {b}), ({other}, {o}, {b}) ON CONFLICT DO NOTHING",
                o = nullable(owner),
                b = nullable(balance)
            )
        }
        3 => {
            let (owner, delta) = (random.below(5) as i64, random.below(7) as i64 - 3);
            for (row_owner, balance) in next.accounts.values_mut() {
                if *row_owner == Some(owner) {
                    *balance = balance.map(|b| b + delta);
                }
            }
            format!("UPDATE accounts SET balance = balance + {delta} WHERE owner = {owner}")
        }
        4 => {
            let owner = maybe(random, 5);
            if let Some(row) = next.accounts.get_mut(&key) {
                row.0 = owner;
            }
            format!(
                "UPDATE accounts SET owner = {} WHERE id = {key}",
                nullable(owner)
            )
        }
        5 => {
            // Moves a row to another key: fails if that key is taken.
            let to = random.below(12) as i64;
            let sql = format!("UPDATE accounts SET id = {to} WHERE id = {key}");
            if let Some(row) = next.accounts.remove(&key) {
                if to != key && next.accounts.contains_key(&to) {
                    return (sql, Outcome::Fails("23505"));
                }
                next.accounts.insert(to, row);
            }
            sql
        }
        6 => {
            let below = random.below(8) as i64;
            next.accounts
                .retain(|_, (_, balance)| !balance.is_some_and(|b| b < below));
            format!("DELETE FROM accounts WHERE balance < {below}")
        }
        7 => {
            let id = random.below(5) as i64;
            let region = ["'north'", "'south'", "NULL"][random.below(3) as usize];
            next.owners.insert(
                id,
                (region != "NULL").then(|| region.trim_matches('\'').to_string()),
            );
            format!(
                "INSERT INTO owners VALUES ({id}, {region}) ON CONFLICT (id) DO UPDATE SET region = excluded.region"
            )
        }
        8 => {
            let id = random.below(5) as i64;
            next.owners.remove(&id);
            format!("DELETE FROM owners WHERE id = {id}")
        }
        _ => {
            let (id, owner) = (next.events.len() as i64, random.below(5) as i64);
            let region = model.owners.get(&owner).cloned();
            next.events.push((id, key, owner, region));
            format!(
                "INSERT INTO events VALUES ({id}, {key}, {owner}, {}, '2026-01-01 {:02}:{:02}:{:02}')",
                random.below(20),
                step / 3600,
                step / 60 % 60,
                step % 60
            )
        }
    };
    (sql, Outcome::Applied(next))
}
