//! A seeded generator of queries over three small tables: filters, joins
//! (inner, outer, USING, NATURAL, three-way), GROUP BY / HAVING, DISTINCT,
//! subqueries, set operations, ORDER BY / LIMIT / OFFSET. Every output
//! column is named, so each query is also a valid materialized view.

use super::random::Random;

pub const TABLES: &str = "
CREATE TABLE t1 (id integer PRIMARY KEY, g integer, n bigint, price numeric(10,2),
                 name text, score double precision, day date, flag boolean);
CREATE TABLE t2 (id integer PRIMARY KEY, g integer, label text, weight numeric(8,3),
                 at timestamp);
CREATE TABLE t3 (g integer PRIMARY KEY, name text, bonus integer);
";

const NAMES: [&str; 6] = ["ann", "bob", "cy", "Dee", "eve", "ann "];
const LABELS: [&str; 4] = ["red", "green", "blue", "red"];

/// A value or NULL (one in `null_one_in`).
fn maybe(random: &mut Random, null_one_in: usize, value: String) -> String {
    if random.below(null_one_in) == 0 {
        "NULL".to_string()
    } else {
        value
    }
}

/// One t1 row's values.
pub fn t1_row(random: &mut Random, id: usize) -> String {
    let g = random_small(random, 6);
    let g = maybe(random, 8, g);
    let n = format!("{}", random.below(2000) as i64 - 500);
    let n = maybe(random, 10, n);
    let price = format!("{}.{:02}", random.below(500), random.below(100));
    let price = maybe(random, 10, price);
    let name = format!("'{}'", random.pick(&NAMES));
    let name = maybe(random, 8, name);
    let score = format!("{}.{}", random.below(100), random.below(10));
    let score = maybe(random, 10, score);
    let day = format!("DATE '2024-01-01' + {}", random.below(60));
    let day = maybe(random, 10, day);
    let flag = random.pick(&["TRUE", "FALSE"]).to_string();
    let flag = maybe(random, 6, flag);
    format!("({id}, {g}, {n}, {price}, {name}, {score}, {day}, {flag})")
}

fn t2_row(random: &mut Random, id: usize) -> String {
    let g = random_small(random, 8);
    let g = maybe(random, 8, g);
    let label = format!("'{}'", random.pick(&LABELS));
    let label = maybe(random, 8, label);
    let weight = format!("{}.{:03}", random.below(50), random.below(1000));
    let weight = maybe(random, 8, weight);
    let at = format!(
        "TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{} minutes'",
        random.below(5000)
    );
    format!("({id}, {g}, {label}, {weight}, {at})")
}

fn random_small(random: &mut Random, bound: usize) -> String {
    random.below(bound).to_string()
}

/// The statements that fill the tables (the same in both servers).
pub fn data(random: &mut Random) -> Vec<String> {
    let t1: Vec<String> = (1..=40).map(|id| t1_row(random, id)).collect();
    let t2: Vec<String> = (1..=25).map(|id| t2_row(random, id)).collect();
    let t3: Vec<String> = (0..6)
        .map(|g| {
            let name = random.pick(&NAMES);
            format!("({g}, '{name}', {})", random.below(10))
        })
        .collect();
    vec![
        format!("INSERT INTO t1 VALUES {}", t1.join(", ")),
        format!("INSERT INTO t2 VALUES {}", t2.join(", ")),
        format!("INSERT INTO t3 VALUES {}", t3.join(", ")),
    ]
}

/// A change to the tables: an insert, an update or a delete by key, or a
/// delete by predicate, so views over them must follow.
pub fn change(random: &mut Random, next_id: &mut usize) -> String {
    *next_id += 1;
    let id = *next_id;
    match random.below(6) {
        0 => format!("INSERT INTO t1 VALUES {}", t1_row(random, id)),
        1 => format!("INSERT INTO t2 VALUES {}", t2_row(random, id)),
        2 => format!(
            "UPDATE t1 SET price = price + 1, g = {} WHERE id = {}",
            random.below(6),
            1 + random.below(40)
        ),
        3 => format!(
            "UPDATE t2 SET label = 'green' WHERE id = {}",
            1 + random.below(25)
        ),
        4 => format!("DELETE FROM t1 WHERE id = {}", 1 + random.below(40)),
        _ => format!("DELETE FROM t2 WHERE g = {}", random.below(8)),
    }
}

pub struct Query {
    pub sql: String,
    /// Whether the rows' order is part of the answer (ORDER BY over every
    /// column; compared in order only for the plain query).
    pub ordered: bool,
}

/// Select-list items over t1 (alias `a`).
const T1_COLUMNS: [&str; 12] = [
    "a.g",
    "a.n",
    "a.price",
    "a.name",
    "a.score",
    "a.day",
    "a.flag",
    "a.price * 2",
    "upper(a.name)",
    "a.n + a.g",
    "a.day + 7",
    "a.score / 2",
];

const T1_PREDICATES: [&str; 10] = [
    "a.g > 2",
    "a.price < 200",
    "a.name LIKE 'a%'",
    "a.flag",
    "a.n BETWEEN 0 AND 900",
    "a.day >= DATE '2024-01-20'",
    "a.score IS NULL",
    "a.g IN (1, 3, 5)",
    "NOT a.flag OR a.g IS NULL",
    "a.price * a.g > 500",
];

const AGGREGATES: [&str; 12] = [
    "count(*)",
    "count(a.n)",
    "sum(a.price)",
    "sum(a.n)",
    "avg(a.price)",
    "avg(a.score)",
    "min(a.name)",
    "max(a.day)",
    "count(DISTINCT a.name)",
    "bool_and(a.flag)",
    "sum(a.g)",
    "max(a.score)",
];

pub struct QueryGenerator {
    random: Random,
}

impl QueryGenerator {
    pub fn new(seed: u64) -> QueryGenerator {
        QueryGenerator {
            random: Random::new(seed),
        }
    }

    pub fn query(&mut self) -> Query {
        let body = match self.random.below(8) {
            0 => self.filter(),
            1 => self.join(),
            2 | 3 => self.aggregate(),
            4 => self.distinct(),
            5 => self.subquery(),
            6 => self.set_operation(),
            _ => self.natural(),
        };
        if self.random.below(4) == 0 {
            self.ordered(body)
        } else {
            Query {
                sql: body.0,
                ordered: false,
            }
        }
    }

    /// ORDER BY every output column (by position), maybe LIMIT / OFFSET.
    fn ordered(&mut self, (body, width): (String, usize)) -> Query {
        let positions: Vec<String> = (1..=width)
            .map(|position| {
                let direction =
                    self.random
                        .pick(&["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]);
                format!("{position}{direction}")
            })
            .collect();
        let mut sql = format!("{body} ORDER BY {}", positions.join(", "));
        match self.random.below(3) {
            0 => sql.push_str(&format!(" LIMIT {}", 1 + self.random.below(10))),
            1 => sql.push_str(&format!(
                " LIMIT {} OFFSET {}",
                1 + self.random.below(10),
                self.random.below(5)
            )),
            _ => {}
        }
        Query { sql, ordered: true }
    }

    /// `count` distinct items from `from`, aliased c1, c2, ….
    fn items(&mut self, from: &[&str], count: usize) -> Vec<String> {
        let mut chosen: Vec<&str> = Vec::new();
        while chosen.len() < count {
            let item = *self.random.pick(from);
            if !chosen.contains(&item) {
                chosen.push(item);
            }
        }
        chosen
            .iter()
            .enumerate()
            .map(|(index, item)| format!("{item} AS c{}", index + 1))
            .collect()
    }

    fn predicate(&mut self) -> String {
        let first = self.random.pick(&T1_PREDICATES).to_string();
        match self.random.below(3) {
            0 => format!("{first} AND {}", self.random.pick(&T1_PREDICATES)),
            1 => format!("({first} OR {})", self.random.pick(&T1_PREDICATES)),
            _ => first,
        }
    }

    fn filter(&mut self) -> (String, usize) {
        let width = 1 + self.random.below(4);
        let items = self.items(&T1_COLUMNS, width);
        let predicate = self.predicate();
        (
            format!("SELECT {} FROM t1 a WHERE {predicate}", items.join(", ")),
            width,
        )
    }

    fn join(&mut self) -> (String, usize) {
        let kind = self
            .random
            .pick(&["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
        let condition = self.random.pick(&[
            "a.g = b.g",
            "a.g = b.g AND b.label <> 'red'",
            "a.id = b.id",
            "a.g = b.g AND a.price > b.weight",
        ]);
        let mut columns: Vec<&str> = T1_COLUMNS[..7].to_vec();
        columns.extend(["b.label", "b.weight", "b.at", "b.id", "b.weight + a.price"]);
        let width = 2 + self.random.below(3);
        let items = self.items(&columns, width);
        let mut sql = format!(
            "SELECT {} FROM t1 a {kind} t2 b ON {condition}",
            items.join(", ")
        );
        if self.random.below(2) == 0 && *kind == "JOIN" {
            sql.push_str(&format!(" WHERE {}", self.predicate()));
        }
        (sql, width)
    }

    fn aggregate(&mut self) -> (String, usize) {
        let group = self
            .random
            .pick(&["a.g", "a.flag", "a.name", "a.g, a.flag", "a.day"]);
        let count = 1 + self.random.below(3);
        let aggregates = self.items(&AGGREGATES, count);
        let keys: Vec<String> = group
            .split(", ")
            .enumerate()
            .map(|(index, key)| format!("{key} AS k{}", index + 1))
            .collect();
        let mut sql = format!(
            "SELECT {}, {} FROM t1 a",
            keys.join(", "),
            aggregates.join(", ")
        );
        if self.random.below(2) == 0 {
            sql.push_str(&format!(" WHERE {}", self.predicate()));
        }
        if self.random.below(6) == 0 {
            // A global aggregate: one row even over no rows.
            let sql = format!(
                "SELECT {} FROM t1 a WHERE {}",
                aggregates.join(", "),
                self.predicate()
            );
            return (sql, count);
        }
        sql.push_str(&format!(" GROUP BY {group}"));
        if self.random.below(3) == 0 {
            let having =
                self.random
                    .pick(&["count(*) > 1", "sum(a.price) > 300", "min(a.n) < 100"]);
            sql.push_str(&format!(" HAVING {having}"));
        }
        (sql, keys.len() + count)
    }

    fn distinct(&mut self) -> (String, usize) {
        let width = 1 + self.random.below(2);
        let items = self.items(&["a.g", "a.flag", "a.name", "a.day", "a.g % 3"], width);
        (
            format!("SELECT DISTINCT {} FROM t1 a", items.join(", ")),
            width,
        )
    }

    fn subquery(&mut self) -> (String, usize) {
        let width = 1 + self.random.below(3);
        let items = self.items(&T1_COLUMNS, width);
        let condition = self.random.pick(&[
            "a.g IN (SELECT b.g FROM t2 b WHERE b.label = 'red')",
            "a.g NOT IN (SELECT b.g FROM t2 b WHERE b.g IS NOT NULL)",
            "EXISTS (SELECT 1 FROM t2 b WHERE b.g = a.g AND b.weight > 10)",
            "NOT EXISTS (SELECT 1 FROM t2 b WHERE b.id = a.id)",
            "a.price > (SELECT avg(c.price) FROM t1 c)",
            "a.n > (SELECT min(c.n) FROM t1 c WHERE c.g = a.g)",
        ]);
        let mut sql = format!("SELECT {} FROM t1 a WHERE {condition}", items.join(", "));
        if self.random.below(3) == 0 {
            sql = format!(
                "SELECT {}, (SELECT count(*) FROM t2 b WHERE b.g = a.g) AS c{} FROM t1 a",
                items.join(", "),
                width + 1
            );
            return (sql, width + 1);
        }
        (sql, width)
    }

    fn set_operation(&mut self) -> (String, usize) {
        let operation = self.random.pick(&[
            "UNION",
            "UNION ALL",
            "INTERSECT",
            "EXCEPT",
            "INTERSECT ALL",
            "EXCEPT ALL",
        ]);
        let (left, right) = *self.random.pick(&[
            ("SELECT a.g AS c1 FROM t1 a", "SELECT b.g FROM t2 b"),
            (
                "SELECT a.name AS c1, a.g AS c2 FROM t1 a WHERE a.flag",
                "SELECT c.name, c.g FROM t3 c",
            ),
            (
                "SELECT a.id AS c1 FROM t1 a WHERE a.g < 3",
                "SELECT b.id FROM t2 b",
            ),
        ]);
        let width = left.matches(" AS c").count();
        (format!("{left} {operation} {right}"), width)
    }

    fn natural(&mut self) -> (String, usize) {
        let (sql, width) = *self.random.pick(&[
            (
                "SELECT g AS c1, id AS c2, label AS c3 FROM t1 NATURAL JOIN t2",
                3,
            ),
            (
                "SELECT g AS c1, name AS c2, bonus AS c3 FROM t1 NATURAL JOIN t3",
                3,
            ),
            ("SELECT g AS c1, weight AS c2 FROM t2 JOIN t3 USING (g)", 2),
            (
                "SELECT g AS c1, n AS c2, bonus AS c3 FROM t1 LEFT JOIN t3 USING (g)",
                3,
            ),
            (
                "SELECT id AS c1, g AS c2, bonus AS c3 FROM t1 NATURAL JOIN t2 NATURAL JOIN t3",
                3,
            ),
            (
                "SELECT g AS c1, count(*) AS c2 FROM t1 FULL JOIN t3 USING (g) GROUP BY g",
                2,
            ),
            (
                "SELECT g AS c1, count(*) AS c2, max(label) AS c3 FROM t1 FULL JOIN t2 USING (g) GROUP BY g",
                3,
            ),
            (
                "SELECT g AS c1, label AS c2, t1.g AS c3 FROM t1 RIGHT JOIN t2 USING (g)",
                3,
            ),
            (
                "SELECT g AS c1, name AS c2, id AS c3, label AS c4 FROM t1 NATURAL JOIN t2 NATURAL JOIN t3",
                4,
            ),
        ]);
        (sql.to_string(), width)
    }
}

/// The rows of the data for a fresh `next_id` start: ids above the
/// initial rows.
pub const FIRST_NEW_ID: usize = 100;

/// Statements that create, then fill, the tables in a seed's order.
pub fn setup(seed: u64) -> Vec<String> {
    let mut random = Random::new(seed);
    let mut statements: Vec<String> = TABLES
        .split(';')
        .map(str::trim)
        .filter(|statement| !statement.is_empty())
        .map(str::to_string)
        .collect();
    statements.extend(data(&mut random));
    statements
}

/// The generator of changes, seeded apart from the data's.
pub fn changes(seed: u64) -> Random {
    Random::new(seed ^ 0x5eed)
}
