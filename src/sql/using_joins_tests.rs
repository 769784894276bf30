use super::*;

fn columns() -> FactorColumns {
    let mut columns = FactorColumns::new();
    columns.insert(
        "u1".into(),
        vec!["id".into(), "g".into(), "n".into(), "name".into()],
    );
    columns.insert("u2".into(), vec!["id".into(), "g".into(), "label".into()]);
    columns.insert("u3".into(), vec!["g".into(), "name".into(), "bonus".into()]);
    columns.insert(
        "u1 a".into(),
        vec!["id".into(), "g".into(), "n".into(), "name".into()],
    );
    columns
}

fn rewritten(sql: &str) -> Result<String> {
    let mut statement = Statement::Query(Box::new(super::super::ast_build::parse_query(sql)));
    rewrite_with(&mut statement, &columns())?;
    Ok(statement.to_string())
}

#[test]
fn full_join_merges_with_coalesce_and_lists_join_columns_first() {
    assert_eq!(
        rewritten("SELECT * FROM u1 FULL JOIN u2 USING (g)").unwrap(),
        "SELECT CASE WHEN u1.\"g\" IS NOT NULL THEN u1.\"g\" ELSE u2.\"g\" END AS \"g\", u1.\"id\", u1.\"n\", u1.\"name\", \
         u2.\"id\", u2.\"label\" FROM u1 FULL JOIN u2 ON u1.\"g\" = u2.\"g\""
    );
}

#[test]
fn right_join_column_is_the_right_sides() {
    assert_eq!(
        rewritten("SELECT g, g + 1 AS h FROM u1 a RIGHT JOIN u2 USING (g) WHERE g > 0 ORDER BY g")
            .unwrap(),
        "SELECT u2.\"g\" AS g, u2.\"g\" + 1 AS h FROM u1 a RIGHT JOIN u2 ON a.\"g\" = u2.\"g\" \
         WHERE u2.\"g\" > 0 ORDER BY g"
    );
}

#[test]
fn three_way_natural_join_sees_one_merged_column() {
    assert_eq!(
        rewritten("SELECT g, name FROM u1 NATURAL JOIN u2 NATURAL JOIN u3").unwrap(),
        "SELECT u1.\"g\" AS g, u1.\"name\" AS name FROM u1 JOIN u2 ON u1.\"id\" = u2.\"id\" \
         AND u1.\"g\" = u2.\"g\" JOIN u3 ON u1.\"g\" = u3.\"g\" AND u1.\"name\" = u3.\"name\""
    );
}

#[test]
fn subqueries_keep_their_own_names() {
    let sql =
        rewritten("SELECT g FROM u1 JOIN u2 USING (g) WHERE EXISTS (SELECT g FROM u3)").unwrap();
    assert!(sql.ends_with("WHERE EXISTS (SELECT g FROM u3)"), "{sql}");
}

#[test]
fn a_missing_or_repeated_join_column_is_an_error_as_in_postgres() {
    let missing = rewritten("SELECT 1 FROM u1 JOIN u2 USING (bonus)").unwrap_err();
    assert_eq!(missing.code, "42703");
    let twice = rewritten("SELECT 1 FROM u1 JOIN u2 ON true JOIN u3 USING (g)").unwrap_err();
    assert_eq!(twice.code, "42702");
    let listed_twice = rewritten("SELECT 1 FROM u1 JOIN u2 USING (g, g)").unwrap_err();
    assert_eq!(listed_twice.code, "42701");
}

#[test]
fn unknown_sides_and_plain_joins_are_left_alone() {
    let unknown = "SELECT g FROM u1 JOIN elsewhere USING(g)";
    assert_eq!(rewritten(unknown).unwrap(), unknown);
    let plain = "SELECT u1.g FROM u1 JOIN u2 ON u1.g = u2.g";
    assert_eq!(rewritten(plain).unwrap(), plain);
}
