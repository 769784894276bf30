//! Joining FROM items: the columns each side makes visible, and USING /
//! NATURAL joins written as ON joins over merged columns (see the parent
//! module).

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CaseWhen, Expr, Ident, JoinConstraint, JoinOperator, ObjectName,
    ObjectNamePart, TableFactor, TableWithJoins, Value,
};

use super::{merged_references, replace_references, Column, FactorColumns};
use crate::error::{Result, WeirError};
use crate::sql::names::identifier;

/// Which rows a join keeps, for the merged column it yields.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Inner,
    Left,
    Right,
    Full,
    /// Cross joins and applies: both sides' columns, nothing merged.
    Cross,
    /// Semi and anti joins: one side's columns.
    LeftOnly,
    RightOnly,
}

fn kind(operator: &JoinOperator) -> Option<Kind> {
    Some(match operator {
        JoinOperator::Join(_) | JoinOperator::Inner(_) => Kind::Inner,
        JoinOperator::Left(_) | JoinOperator::LeftOuter(_) => Kind::Left,
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => Kind::Right,
        JoinOperator::FullOuter(_) => Kind::Full,
        JoinOperator::CrossJoin(_) | JoinOperator::CrossApply | JoinOperator::OuterApply => {
            Kind::Cross
        }
        JoinOperator::Semi(_)
        | JoinOperator::LeftSemi(_)
        | JoinOperator::Anti(_)
        | JoinOperator::LeftAnti(_) => Kind::LeftOnly,
        JoinOperator::RightSemi(_) | JoinOperator::RightAnti(_) => Kind::RightOnly,
        _ => return None,
    })
}

pub(super) fn constraint(operator: &JoinOperator) -> Option<&JoinConstraint> {
    match operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::RightAnti(c) => Some(c),
        _ => None,
    }
}

fn constraint_mut(operator: &mut JoinOperator) -> Option<&mut JoinConstraint> {
    match operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c) => Some(c),
        _ => None,
    }
}

/// The columns a FROM item makes visible, its USING and NATURAL joins
/// rewritten as ON joins; None when a factor's columns are unknown.
pub(super) fn joined_columns(
    from: &mut TableWithJoins,
    columns: &FactorColumns,
) -> Result<Option<Vec<Column>>> {
    let Some(mut visible) = factor_columns(&mut from.relation, columns)? else {
        return Ok(None);
    };
    for join in &mut from.joins {
        let Some(right) = factor_columns(&mut join.relation, columns)? else {
            return Ok(None);
        };
        let Some(kind) = kind(&join.join_operator) else {
            return Ok(None);
        };
        let names = match constraint(&join.join_operator) {
            Some(JoinConstraint::Using(names)) => using_names(names)?,
            Some(JoinConstraint::Natural) => common_names(&visible, &right),
            Some(JoinConstraint::On(_)) => {
                let both: Vec<Column> = visible.iter().chain(&right).cloned().collect();
                let merged = merged_references(&both);
                if let Some(JoinConstraint::On(condition)) = constraint_mut(&mut join.join_operator)
                {
                    replace_references(condition, &merged);
                }
                visible = side_columns(kind, visible, right);
                continue;
            }
            _ => {
                visible = side_columns(kind, visible, right);
                continue;
            }
        };
        let Some(constraint) = constraint_mut(&mut join.join_operator) else {
            return Ok(None);
        };
        visible = merge(kind, visible, right, &names, constraint)?;
    }
    Ok(Some(visible))
}

fn side_columns(kind: Kind, left: Vec<Column>, right: Vec<Column>) -> Vec<Column> {
    match kind {
        Kind::LeftOnly => left,
        Kind::RightOnly => right,
        _ => left.into_iter().chain(right).collect(),
    }
}

fn using_names(names: &[ObjectName]) -> Result<Vec<String>> {
    let mut result: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        let text = match name.0.as_slice() {
            [ObjectNamePart::Identifier(ident)] => identifier(ident),
            _ => name.to_string(),
        };
        if result.contains(&text) {
            return Err(WeirError::new(
                "42701",
                format!("column name \"{text}\" appears more than once in USING clause"),
            ));
        }
        result.push(text);
    }
    Ok(result)
}

/// NATURAL's join columns: the left's columns the right also has, in the
/// left's order.
fn common_names(left: &[Column], right: &[Column]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for column in left {
        if right.iter().any(|r| r.name == column.name) && !names.contains(&column.name) {
            names.push(column.name.clone());
        }
    }
    names
}

/// Joins on `names`: the merged columns first, then the left's others,
/// then the right's, as Postgres orders them.
fn merge(
    kind: Kind,
    left: Vec<Column>,
    right: Vec<Column>,
    names: &[String],
    constraint: &mut JoinConstraint,
) -> Result<Vec<Column>> {
    let mut conditions = Vec::with_capacity(names.len());
    let mut visible = Vec::with_capacity(left.len() + right.len());
    for name in names {
        let left_column = the_column(&left, name, "left")?;
        let right_column = the_column(&right, name, "right")?;
        conditions.push(Expr::BinaryOp {
            left: Box::new(left_column.reference.clone()),
            op: BinaryOperator::Eq,
            right: Box::new(right_column.reference.clone()),
        });
        let reference = match kind {
            Kind::Right => right_column.reference.clone(),
            Kind::Full => coalesce(&left_column.reference, &right_column.reference),
            _ => left_column.reference.clone(),
        };
        visible.push(Column {
            name: name.clone(),
            reference,
            merged: true,
        });
    }
    *constraint = JoinConstraint::On(
        conditions
            .into_iter()
            .reduce(|all, condition| Expr::BinaryOp {
                left: Box::new(all),
                op: BinaryOperator::And,
                right: Box::new(condition),
            })
            .unwrap_or(Expr::Value(Value::Boolean(true).into())),
    );
    let others = |columns: Vec<Column>| columns.into_iter().filter(|c| !names.contains(&c.name));
    visible.extend(others(left));
    visible.extend(others(right));
    Ok(visible)
}

/// `COALESCE(left, right)`, spelled as the CASE DataFusion's simplifier
/// would make of it: a view's plan is not simplified before it runs.
fn coalesce(left: &Expr, right: &Expr) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen {
            condition: Expr::IsNotNull(Box::new(left.clone())),
            result: left.clone(),
        }],
        else_result: Some(Box::new(right.clone())),
    }
}

/// The one column of a join side named `name` (42703 / 42702 as Postgres).
fn the_column<'a>(columns: &'a [Column], name: &str, side: &str) -> Result<&'a Column> {
    let mut matching = columns.iter().filter(|column| column.name == name);
    match (matching.next(), matching.next()) {
        (Some(column), None) => Ok(column),
        (None, _) => Err(WeirError::new(
            "42703",
            format!("column \"{name}\" specified in USING clause does not exist in {side} table"),
        )),
        (Some(_), Some(_)) => Err(WeirError::new(
            "42702",
            format!("common column name \"{name}\" appears more than once in {side} table"),
        )
        .with_hint("Qualify the columns, or join with ON.")),
    }
}

/// A factor's columns, referenced through its alias or name; a nested
/// join's rewritten in place.
fn factor_columns(
    factor: &mut TableFactor,
    columns: &FactorColumns,
) -> Result<Option<Vec<Column>>> {
    if let TableFactor::NestedJoin {
        table_with_joins,
        alias: None,
    } = factor
    {
        return joined_columns(table_with_joins, columns);
    }
    let Some(names) = columns.get(&factor.to_string()) else {
        return Ok(None);
    };
    let Some(qualifier) = qualifier(factor) else {
        return Ok(None);
    };
    Ok(Some(
        names
            .iter()
            .map(|name| {
                let mut parts = qualifier.clone();
                parts.push(Ident::with_quote('"', name.clone()));
                Column {
                    name: name.clone(),
                    reference: Expr::CompoundIdentifier(parts),
                    merged: false,
                }
            })
            .collect(),
    ))
}

/// How the factor's columns are qualified: its alias, or a table's name.
fn qualifier(factor: &TableFactor) -> Option<Vec<Ident>> {
    match factor {
        TableFactor::Table {
            alias: Some(alias), ..
        }
        | TableFactor::Derived {
            alias: Some(alias), ..
        }
        | TableFactor::Function {
            alias: Some(alias), ..
        }
        | TableFactor::UNNEST {
            alias: Some(alias), ..
        } => Some(vec![alias.name.clone()]),
        TableFactor::Table {
            name, alias: None, ..
        } => name
            .0
            .iter()
            .map(|part| match part {
                ObjectNamePart::Identifier(ident) => Some(ident.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}
