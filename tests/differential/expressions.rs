//! A seeded generator of typed scalar expressions: literals of every type
//! weir supports (type limits and NULLs among them) combined through
//! operators, casts and functions that PostgreSQL also has, nested a few
//! levels. Each expression is typed as PostgreSQL types it, so an
//! operand is always of a type its operator takes there.

use super::random::Random;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Type {
    Int2,
    Int4,
    Int8,
    Numeric,
    Float4,
    Float8,
    Text,
    Varchar,
    Bytea,
    Bool,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Interval,
    Int4Array,
    TextArray,
}

use Type::*;

pub const SCALARS: [Type; 15] = [
    Int2,
    Int4,
    Int8,
    Numeric,
    Float4,
    Float8,
    Text,
    Varchar,
    Bytea,
    Bool,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Interval,
];

impl Type {
    /// The name to CAST to.
    pub fn sql(self) -> &'static str {
        match self {
            Int2 => "smallint",
            Int4 => "integer",
            Int8 => "bigint",
            Numeric => "numeric",
            Float4 => "real",
            Float8 => "double precision",
            Text => "text",
            Varchar => "varchar",
            Bytea => "bytea",
            Bool => "boolean",
            Date => "date",
            Time => "time",
            Timestamp => "timestamp",
            Timestamptz => "timestamptz",
            Interval => "interval",
            Int4Array => "integer[]",
            TextArray => "text[]",
        }
    }
}

/// Literal texts of a type, limits first. Each is a complete SQL
/// expression of that type in PostgreSQL.
fn literals(of: Type) -> &'static [&'static str] {
    match of {
        Int2 => &[
            "CAST(32767 AS smallint)",
            "CAST(-32768 AS smallint)",
            "CAST(0 AS smallint)",
            "CAST(7 AS smallint)",
            "CAST(-3 AS smallint)",
            "100::int2",
        ],
        Int4 => &[
            "2147483647",
            "(-2147483648)",
            "0",
            "1",
            "2",
            "(-7)",
            "42",
            "1000000",
            "CAST(13 AS integer)",
        ],
        Int8 => &[
            "9223372036854775807",
            "CAST(-9223372036854775808 AS bigint)",
            "CAST(0 AS bigint)",
            "CAST(3 AS bigint)",
            "(-5)::int8",
            "10000000000",
        ],
        Numeric => &[
            "0.1",
            "0.2",
            "1.5",
            "(-2.5)",
            "3.14159",
            "0.0",
            "100.00",
            "12345678901234567890123",
            "99999999999999999999.99",
            "CAST('1.25' AS numeric(5,2))",
            "CAST(2 AS numeric)",
            "1e3",
            "0.000001",
        ],
        Float4 => &[
            "CAST(1.5 AS real)",
            "CAST(0.1 AS real)",
            "CAST(-3.25 AS real)",
            "CAST('3.4e38' AS real)",
            "CAST(0 AS real)",
        ],
        Float8 => &[
            "CAST(0.1 AS double precision)",
            "CAST(2.5 AS double precision)",
            "CAST(-1 AS double precision)",
            "CAST(0 AS double precision)",
            "'1e308'::float8",
            "'NaN'::float8",
            "'Infinity'::float8",
            "'-Infinity'::float8",
            "'-0'::float8",
            "CAST(1e-300 AS double precision)",
        ],
        Text => &[
            "'abc'",
            "''",
            "'Hello World'",
            "'  padded  '",
            "'a,b,,c'",
            "'123'",
            "'-4.5'",
            "'ÄÖü ß'",
            "'2024-02-29'",
            "'1 day'",
            "'true'",
            "CAST('xyz' AS text)",
            "'MiXeD cAsE'",
        ],
        Varchar => &[
            "CAST('abc' AS varchar(10))",
            "CAST('' AS varchar)",
            "CAST('word ' AS varchar(5))",
        ],
        Bytea => &[
            "'\\x0a0b'::bytea",
            "CAST('\\xdeadbeef' AS bytea)",
            "''::bytea",
            "'abc'::bytea",
        ],
        Bool => &["TRUE", "FALSE"],
        Date => &[
            "DATE '2024-02-29'",
            "DATE '1970-01-01'",
            "DATE '2000-12-31'",
            "DATE '1999-01-10'",
            "DATE '9999-12-31'",
        ],
        Time => &[
            "TIME '12:34:56.789'",
            "TIME '00:00:00'",
            "TIME '23:59:59.999999'",
            "TIME '08:15'",
        ],
        Timestamp => &[
            "TIMESTAMP '2024-03-10 02:30:00'",
            "TIMESTAMP '1970-01-01 00:00:00'",
            "TIMESTAMP '2023-12-31 23:59:59.5'",
            "TIMESTAMP '2000-02-29 12:00:00.123456'",
        ],
        Timestamptz => &[
            "TIMESTAMPTZ '2024-03-10 02:30:00+05:30'",
            "TIMESTAMPTZ '1970-01-01 00:00:00+00'",
            "TIMESTAMPTZ '2023-06-15 08:00:00-07'",
        ],
        Interval => &[
            "INTERVAL '1 day'",
            "INTERVAL '24 hours'",
            "INTERVAL '1 mon 2 days 03:04:05.5'",
            "INTERVAL '-1 year'",
            "INTERVAL '90 minutes'",
            "INTERVAL '30 days'",
            "INTERVAL '1 month'",
            "INTERVAL '0.5 seconds'",
        ],
        Int4Array => &[
            "ARRAY[1, 2, 3]",
            "ARRAY[3, NULL, 1]",
            "CAST(ARRAY[] AS integer[])",
            "ARRAY[5]",
        ],
        TextArray => &["ARRAY['a', 'b']", "ARRAY['x', NULL]", "ARRAY['hello']"],
    }
}

/// An operator or function: a template with `{0}`, `{1}`, … for its
/// operands, their types, and its result type.
struct Form {
    template: &'static str,
    operands: &'static [Type],
    result: Type,
}

const fn form(template: &'static str, operands: &'static [Type], result: Type) -> Form {
    Form {
        template,
        operands,
        result,
    }
}

/// Arithmetic and comparison within one numeric type, for each.
fn arithmetic(of: Type) -> Vec<Form> {
    let pair: &'static [Type] = match of {
        Int2 => &[Int2, Int2],
        Int4 => &[Int4, Int4],
        Int8 => &[Int8, Int8],
        Numeric => &[Numeric, Numeric],
        Float4 => &[Float4, Float4],
        _ => &[Float8, Float8],
    };
    let one: &'static [Type] = &pair[..1];
    let mut forms = vec![
        form("({0} + {1})", pair, of),
        form("({0} - {1})", pair, of),
        form("({0} * {1})", pair, of),
        form("({0} / {1})", pair, of),
        form("(- {0})", one, of),
        form("abs({0})", one, of),
    ];
    if !matches!(of, Float4 | Float8) {
        forms.push(form("({0} % {1})", pair, of));
    }
    forms
}

#[rustfmt::skip]
const FORMS: &[Form] = &[
    // Mixed arithmetic: the wider type wins.
    form("({0} + {1})", &[Int4, Int8], Int8),
    form("({0} * {1})", &[Int2, Int4], Int4),
    form("({0} + {1})", &[Int4, Numeric], Numeric),
    form("({0} / {1})", &[Int8, Numeric], Numeric),
    form("({0} * {1})", &[Int4, Float8], Float8),
    form("({0} - {1})", &[Numeric, Float8], Float8),
    form("({0} + {1})", &[Float4, Float8], Float8),
    // Mathematical functions.
    form("round({0})", &[Numeric], Numeric),
    form("round({0}, {1})", &[Numeric, Int4], Numeric),
    form("round({0})", &[Float8], Float8),
    form("trunc({0})", &[Numeric], Numeric),
    form("trunc({0}, {1})", &[Numeric, Int4], Numeric),
    form("trunc({0})", &[Float8], Float8),
    form("ceil({0})", &[Numeric], Numeric),
    form("ceil({0})", &[Float8], Float8),
    form("floor({0})", &[Numeric], Numeric),
    form("floor({0})", &[Float8], Float8),
    form("sqrt({0})", &[Float8], Float8),
    form("sqrt({0})", &[Numeric], Numeric),
    form("power({0}, {1})", &[Float8, Float8], Float8),
    form("power({0}, {1})", &[Numeric, Numeric], Numeric),
    form("exp({0})", &[Float8], Float8),
    form("ln({0})", &[Float8], Float8),
    form("log({0})", &[Float8], Float8),
    form("log10({0})", &[Float8], Float8),
    form("mod({0}, {1})", &[Int4, Int4], Int4),
    form("mod({0}, {1})", &[Numeric, Numeric], Numeric),
    form("sign({0})", &[Float8], Float8),
    form("sign({0})", &[Numeric], Numeric),
    form("cbrt({0})", &[Float8], Float8),
    form("degrees({0})", &[Float8], Float8),
    form("radians({0})", &[Float8], Float8),
    form("sin({0})", &[Float8], Float8),
    form("cos({0})", &[Float8], Float8),
    form("atan2({0}, {1})", &[Float8, Float8], Float8),
    form("gcd({0}, {1})", &[Int4, Int4], Int4),
    form("lcm({0}, {1})", &[Int8, Int8], Int8),
    form("pi()", &[], Float8),
    form("(2 ^ {0})", &[Float8], Float8),
    // Text.
    form("length({0})", &[Text], Int4),
    form("char_length({0})", &[Text], Int4),
    form("octet_length({0})", &[Text], Int4),
    form("bit_length({0})", &[Text], Int4),
    form("upper({0})", &[Text], Text),
    form("lower({0})", &[Text], Text),
    form("initcap({0})", &[Text], Text),
    form("substr({0}, {1})", &[Text, Int4], Text),
    form("substr({0}, {1}, {2})", &[Text, Int4, Int4], Text),
    form("substring({0} FROM {1} FOR {2})", &[Text, Int4, Int4], Text),
    form("position({0} IN {1})", &[Text, Text], Int4),
    form("strpos({0}, {1})", &[Text, Text], Int4),
    form("replace({0}, {1}, {2})", &[Text, Text, Text], Text),
    form("trim({0})", &[Text], Text),
    form("ltrim({0})", &[Text], Text),
    form("rtrim({0})", &[Text], Text),
    form("btrim({0}, {1})", &[Text, Text], Text),
    form("lpad({0}, {1}, {2})", &[Text, Int4, Text], Text),
    form("rpad({0}, {1})", &[Text, Int4], Text),
    form("left({0}, {1})", &[Text, Int4], Text),
    form("right({0}, {1})", &[Text, Int4], Text),
    form("repeat({0}, {1})", &[Text, Int2], Text),
    form("reverse({0})", &[Text], Text),
    form("split_part({0}, ',', {1})", &[Text, Int4], Text),
    form("starts_with({0}, {1})", &[Text, Text], Bool),
    form("concat({0}, {1})", &[Text, Int4], Text),
    form("concat_ws('-', {0}, {1}, {2})", &[Text, Numeric, Date], Text),
    form("({0} || {1})", &[Text, Text], Text),
    form("({0} || {1})", &[Text, Int8], Text),
    form("md5({0})", &[Text], Text),
    form("chr({0})", &[Int4], Text),
    form("ascii({0})", &[Text], Int4),
    form("to_hex({0})", &[Int4], Text),
    form("to_hex({0})", &[Int8], Text),
    form("translate({0}, 'abc', 'xy')", &[Text], Text),
    form("regexp_replace({0}, '[aeiou]', '_', 'g')", &[Text], Text),
    form("({0} ~ '^[A-Z]')", &[Text], Bool),
    form("({0} LIKE {1})", &[Text, Text], Bool),
    form("({0} LIKE '%b%')", &[Text], Bool),
    form("({0} ILIKE 'h%')", &[Text], Bool),
    form("({0} || {1})", &[Varchar, Varchar], Text),
    form("length({0})", &[Varchar], Int4),
    form("upper({0})", &[Varchar], Text),
    // Bytes.
    form("length({0})", &[Bytea], Int4),
    form("octet_length({0})", &[Bytea], Int4),
    form("md5({0})", &[Bytea], Text),
    form("encode({0}, 'hex')", &[Bytea], Text),
    form("encode({0}, 'base64')", &[Bytea], Text),
    form("decode({0}, 'hex')", &[Text], Bytea),
    form("({0} || {1})", &[Bytea, Bytea], Bytea),
    form("sha256({0})", &[Bytea], Bytea),
    // Dates, times and intervals.
    form("({0} + {1})", &[Date, Int4], Date),
    form("({0} - {1})", &[Date, Int4], Date),
    form("({0} - {1})", &[Date, Date], Int4),
    form("({0} + {1})", &[Date, Interval], Timestamp),
    form("({0} + {1})", &[Timestamp, Interval], Timestamp),
    form("({0} - {1})", &[Timestamp, Interval], Timestamp),
    form("({0} - {1})", &[Timestamp, Timestamp], Interval),
    form("({0} + {1})", &[Timestamptz, Interval], Timestamptz),
    form("({0} - {1})", &[Timestamptz, Timestamptz], Interval),
    form("({0} + {1})", &[Time, Interval], Time),
    form("({0} - {1})", &[Time, Time], Interval),
    form("({0} + {1})", &[Interval, Interval], Interval),
    form("({0} - {1})", &[Interval, Interval], Interval),
    form("(- {0})", &[Interval], Interval),
    form("({0} * {1})", &[Interval, Float8], Interval),
    form("({0} * {1})", &[Interval, Int4], Interval),
    form("({0} / {1})", &[Interval, Float8], Interval),
    form("date_trunc('day', {0})", &[Timestamp], Timestamp),
    form("date_trunc('month', {0})", &[Timestamp], Timestamp),
    form("date_trunc('hour', {0})", &[Timestamptz], Timestamptz),
    form("date_trunc('hour', {0})", &[Interval], Interval),
    form("date_part('year', {0})", &[Timestamp], Float8),
    form("date_part('epoch', {0})", &[Timestamp], Float8),
    form("date_part('dow', {0})", &[Date], Float8),
    form("EXTRACT(YEAR FROM {0})", &[Timestamp], Numeric),
    form("EXTRACT(EPOCH FROM {0})", &[Timestamptz], Numeric),
    form("EXTRACT(DAY FROM {0})", &[Interval], Numeric),
    form("EXTRACT(EPOCH FROM {0})", &[Interval], Numeric),
    form("EXTRACT(MINUTE FROM {0})", &[Time], Numeric),
    form("EXTRACT(MONTH FROM {0})", &[Date], Numeric),
    form("to_char({0}, 'YYYY-MM-DD HH24:MI:SS')", &[Timestamp], Text),
    form("to_char({0}, 'yyyy-mm-dd')", &[Timestamp], Text),
    form("to_char({0}, 'Day DD Mon YYYY')", &[Date], Text),
    form("to_char({0}, 'HH12:MI AM')", &[Timestamptz], Text),
    form("to_char({0}, {1})", &[Timestamp, Text], Text),
    form("to_char({0}, '999D99')", &[Numeric], Text),
    form("to_char({0}, 'FM9999')", &[Int4], Text),
    form("to_date({0}, 'YYYY-MM-DD')", &[Text], Date),
    form("to_timestamp({0})", &[Float8], Timestamptz),
    form("make_date({0}, 2, 28)", &[Int4], Date),
    form("age({0}, {1})", &[Timestamp, Timestamp], Interval),
    form("justify_hours({0})", &[Interval], Interval),
    form("justify_days({0})", &[Interval], Interval),
    form("justify_interval({0})", &[Interval], Interval),
    form("CAST({0} AS date)", &[Timestamp], Date),
    form("({0} < {1})", &[Date, Timestamp], Bool),
    // Conditionals and predicates, over a few types.
    form("COALESCE({0}, {1})", &[Int4, Int4], Int4),
    form("COALESCE({0}, {1})", &[Text, Text], Text),
    form("NULLIF({0}, {1})", &[Int4, Int4], Int4),
    form("NULLIF({0}, {1})", &[Interval, Interval], Interval),
    form("GREATEST({0}, {1})", &[Numeric, Numeric], Numeric),
    form("LEAST({0}, {1})", &[Text, Text], Text),
    form("GREATEST({0}, {1})", &[Timestamp, Timestamp], Timestamp),
    form("CASE WHEN {0} THEN {1} ELSE {2} END", &[Bool, Int8, Int8], Int8),
    form("CASE WHEN {0} THEN {1} ELSE {2} END", &[Bool, Text, Text], Text),
    form("({0} AND {1})", &[Bool, Bool], Bool),
    form("({0} OR {1})", &[Bool, Bool], Bool),
    form("(NOT {0})", &[Bool], Bool),
    form("({0} IS NULL)", &[Numeric], Bool),
    form("({0} IS DISTINCT FROM {1})", &[Int4, Int4], Bool),
    form("({0} IN ({1}, {2}))", &[Int4, Int4, Int4], Bool),
    form("({0} BETWEEN {1} AND {2})", &[Numeric, Numeric, Numeric], Bool),
    form("({0} = {1})", &[Interval, Interval], Bool),
    form("({0} < {1})", &[Interval, Interval], Bool),
    form("({0} = {1})", &[Numeric, Float8], Bool),
    form("({0} < {1})", &[Int8, Numeric], Bool),
    // Arrays.
    form("array_length({0}, 1)", &[Int4Array], Int4),
    form("cardinality({0})", &[Int4Array], Int4),
    form("array_position({0}, {1})", &[Int4Array, Int4], Int4),
    form("array_append({0}, {1})", &[Int4Array, Int4], Int4Array),
    form("array_prepend({1}, {0})", &[Int4Array, Int4], Int4Array),
    form("array_cat({0}, {1})", &[Int4Array, Int4Array], Int4Array),
    form("({0} || {1})", &[Int4Array, Int4Array], Int4Array),
    form("array_remove({0}, {1})", &[Int4Array, Int4], Int4Array),
    form("array_to_string({0}, ',')", &[Int4Array], Text),
    form("array_to_string({0}, '|')", &[TextArray], Text),
    form("({0})[{1}]", &[Int4Array, Int4], Int4),
    form("({0})[1]", &[TextArray], Text),
    form("({0} = ANY({1}))", &[Int4, Int4Array], Bool),
    form("array_upper({0}, 1)", &[Int4Array], Int4),
    form("cardinality({0})", &[TextArray], Int4),
    form("string_to_array({0}, ',')", &[Text], TextArray),
];

pub struct Generator {
    random: Random,
    forms: Vec<Form>,
    /// How deep operators nest (`DIFFERENTIAL_DEPTH`, default 3; 1 gives
    /// one operator over literals, for finding a difference's cause).
    depth: u32,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        let mut forms: Vec<Form> = [Int2, Int4, Int8, Numeric, Float4, Float8]
            .into_iter()
            .flat_map(arithmetic)
            .collect();
        forms.extend(FORMS.iter().map(|f| form(f.template, f.operands, f.result)));
        let depth = std::env::var("DIFFERENTIAL_DEPTH")
            .ok()
            .and_then(|depth| depth.parse().ok())
            .unwrap_or(3);
        Generator {
            random: Random::new(seed),
            forms,
            depth,
        }
    }

    /// A whole statement: one expression of a random type, as `SELECT e`.
    pub fn statement(&mut self) -> String {
        let result = SCALARS[self.random.below(SCALARS.len())];
        let depth = self.depth;
        let expression = match self.random.below(6) {
            0 => self.cast(depth - 1),
            1 => self.comparison(depth - 1),
            _ => self.expression(result, depth),
        };
        format!("SELECT {expression}")
    }

    /// An expression of type `of`, at most `depth` levels of operators.
    pub fn expression(&mut self, of: Type, depth: u32) -> String {
        if depth == 0 || self.random.below(4) == 0 {
            return self.leaf(of);
        }
        let candidates: Vec<usize> = (0..self.forms.len())
            .filter(|&index| self.forms[index].result == of)
            .collect();
        if candidates.is_empty() {
            return self.leaf(of);
        }
        let chosen = candidates[self.random.below(candidates.len())];
        let (template, operands) = (self.forms[chosen].template, self.forms[chosen].operands);
        let mut text = template.to_string();
        for (index, operand) in operands.iter().enumerate() {
            let argument = self.expression(*operand, depth - 1);
            text = text.replace(&format!("{{{index}}}"), &argument);
        }
        text
    }

    fn leaf(&mut self, of: Type) -> String {
        if self.random.below(12) == 0 {
            return format!("CAST(NULL AS {})", of.sql());
        }
        let choices = literals(of);
        choices[self.random.below(choices.len())].to_string()
    }

    /// A cast between two scalar types (also the ones PostgreSQL refuses,
    /// whose SQLSTATE must match).
    fn cast(&mut self, depth: u32) -> String {
        let from = SCALARS[self.random.below(SCALARS.len())];
        let to = SCALARS[self.random.below(SCALARS.len())];
        let operand = self.expression(from, depth);
        match self.random.below(3) {
            0 => format!("({operand})::{}", to.sql()),
            1 => format!("CAST({operand} AS {})", self.sized(to)),
            _ => format!("CAST({operand} AS {})", to.sql()),
        }
    }

    /// A type name, sometimes with a length, precision or scale.
    fn sized(&mut self, of: Type) -> String {
        match (of, self.random.below(2)) {
            (Numeric, 0) => "numeric(10, 2)".to_string(),
            (Numeric, _) => "numeric(4, 1)".to_string(),
            (Varchar, _) => "varchar(3)".to_string(),
            (Text, _) => "char(4)".to_string(),
            _ => of.sql().to_string(),
        }
    }

    /// A comparison between two values of one type (ordering, equality).
    fn comparison(&mut self, depth: u32) -> String {
        let of = SCALARS[self.random.below(SCALARS.len())];
        let operator = ["=", "<>", "<", "<=", ">", ">="][self.random.below(6)];
        let left = self.expression(of, depth);
        let right = self.expression(of, depth);
        format!("({left} {operator} {right})")
    }
}
