//! weir's change: a Decimal128 value as Postgres NUMERIC, in both formats,
//! for every value a Decimal128 holds. rust_decimal (what arrow-pg used)
//! holds 28 digits, so a numeric(38, 10) value past 18 integer digits
//! failed to encode in binary ("Number exceeds maximum value that can be
//! represented", 22003) while the same row went out fine as text.

use std::error::Error;

use bytes::{BufMut, BytesMut};
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use postgres_types::{IsNull, ToSql, Type};

#[derive(Debug, Clone, Copy)]
pub struct PgNumeric {
    value: i128,
    scale: u32,
}

impl PgNumeric {
    /// `value` × 10^-`scale`; a negative scale is multiplied out.
    pub fn new(value: i128, scale: i8) -> PgNumeric {
        match u32::try_from(scale) {
            Ok(scale) => PgNumeric { value, scale },
            Err(_) => PgNumeric {
                value: value.saturating_mul(10i128.saturating_pow(u32::from(scale.unsigned_abs()))),
                scale: 0,
            },
        }
    }

    /// The decimal digits of |value| with `scale` of them after the point.
    fn digits(&self) -> (String, String) {
        let digits = self.value.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let (whole, fraction) = padded.split_at(padded.len() - scale);
        (whole.to_string(), fraction.to_string())
    }
}

impl ToSqlText for PgNumeric {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        _format_options: &FormatOptions,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        let (whole, fraction) = self.digits();
        if self.value < 0 {
            out.put_u8(b'-');
        }
        out.put_slice(whole.as_bytes());
        if !fraction.is_empty() {
            out.put_u8(b'.');
            out.put_slice(fraction.as_bytes());
        }
        Ok(IsNull::No)
    }
}

impl ToSql for PgNumeric {
    /// Postgres's binary NUMERIC: digit count, weight (of the first digit,
    /// in powers of 10000), sign, display scale, then base-10000 digits
    /// without leading or trailing zero digits.
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        self.write_binary(out);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::NUMERIC)
    }

    postgres_types::to_sql_checked!();
}

impl PgNumeric {
    /// Postgres's binary NUMERIC (see `ToSql`).
    pub fn write_binary(&self, out: &mut BytesMut) {
        let (whole, fraction) = self.digits();
        let whole = whole.trim_start_matches('0');
        // Whole digits padded on the left and fraction digits on the right
        // to groups of four.
        let whole_groups = whole.len().div_ceil(4);
        let whole = format!("{}{whole}", "0".repeat(whole_groups * 4 - whole.len()));
        let fraction_groups = fraction.len().div_ceil(4);
        let fraction = format!("{fraction}{}", "0".repeat(fraction_groups * 4 - fraction.len()));
        let all = format!("{whole}{fraction}");
        let mut groups: Vec<i16> = all
            .as_bytes()
            .chunks(4)
            .map(|chunk| std::str::from_utf8(chunk).unwrap_or("0").parse().unwrap_or(0))
            .collect();
        let mut weight = whole_groups as i32 - 1;
        while groups.first() == Some(&0) {
            groups.remove(0);
            weight -= 1;
        }
        while groups.last() == Some(&0) {
            groups.pop();
        }
        if groups.is_empty() {
            weight = 0;
        }
        out.put_i16(groups.len() as i16);
        out.put_i16(weight as i16);
        out.put_u16(if self.value < 0 { 0x4000 } else { 0x0000 });
        out.put_u16(self.scale as u16);
        for group in groups {
            out.put_i16(group);
        }
    }
}
