//! Money as integer minor units plus an ISO 4217 currency — never a float.
//!
//! The API takes amounts as plain decimal strings (`"10.00"`). Parsing
//! normalizes at the currency's exponent, so `"10.0"`, `"10.00"` and
//! `"10.000"` are the same EUR amount, while `"10.001"` is rejected as more
//! precise than the currency allows.

use std::fmt;

use iso_currency::Currency;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Money {
    minor: i64,
    currency: Currency,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MoneyError {
    #[error("currency must be an ISO 4217 code such as EUR")]
    UnknownCurrency,
    #[error("currency {0} has no minor unit and cannot be charged")]
    NotChargeable(String),
    #[error(
        "amount must be a plain decimal string such as \"10.00\" (no sign, exponent or spaces)"
    )]
    Malformed,
    #[error("amount must be greater than zero")]
    NotPositive,
    #[error("amount has more decimal places than {currency} allows ({exponent})")]
    TooPrecise { currency: String, exponent: u16 },
    #[error("amount is too large")]
    TooLarge,
}

impl Money {
    /// Parses `amount` (a decimal string) in `currency` (case-insensitive).
    pub fn parse(amount: &str, currency: &str) -> Result<Self, MoneyError> {
        let currency = parse_currency(currency)?;
        let exponent = currency
            .exponent()
            .ok_or_else(|| MoneyError::NotChargeable(currency.code().to_owned()))?;
        let minor = parse_minor_units(amount, exponent, currency)?;
        if minor == 0 {
            return Err(MoneyError::NotPositive);
        }
        Ok(Self { minor, currency })
    }

    pub fn minor_units(&self) -> i64 {
        self.minor
    }

    pub fn currency_code(&self) -> &'static str {
        self.currency.code()
    }

    /// The canonical decimal string: exactly `exponent` decimals.
    pub fn to_decimal_string(&self) -> String {
        let exponent = u32::from(self.currency.exponent().unwrap_or(0));
        if exponent == 0 {
            return self.minor.to_string();
        }
        let scale = 10_i64.pow(exponent);
        format!(
            "{}.{:0width$}",
            self.minor / scale,
            self.minor % scale,
            width = exponent as usize
        )
    }

    /// Rebuilds a value read back from our own database.
    pub fn from_minor(minor: i64, currency: &str) -> Result<Self, MoneyError> {
        Ok(Self {
            minor,
            currency: parse_currency(currency)?,
        })
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.to_decimal_string(), self.currency_code())
    }
}

fn parse_currency(code: &str) -> Result<Currency, MoneyError> {
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(MoneyError::UnknownCurrency);
    }
    Currency::from_code(&code.to_ascii_uppercase()).ok_or(MoneyError::UnknownCurrency)
}

fn parse_minor_units(amount: &str, exponent: u16, currency: Currency) -> Result<i64, MoneyError> {
    let (whole, fraction) = match amount.split_once('.') {
        Some((w, f)) => (w, f),
        None => (amount, ""),
    };
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits_only(whole)
        || !digits_only(fraction)
        || (amount.contains('.') && fraction.is_empty())
    {
        return Err(MoneyError::Malformed);
    }
    let exponent_usize = usize::from(exponent);
    let (kept, dropped) = fraction.split_at(fraction.len().min(exponent_usize));
    if dropped.bytes().any(|b| b != b'0') {
        return Err(MoneyError::TooPrecise {
            currency: currency.code().to_owned(),
            exponent,
        });
    }
    let mut minor: i64 = 0;
    let padded = kept
        .bytes()
        .chain(std::iter::repeat_n(b'0', exponent_usize - kept.len()));
    for b in whole.bytes().chain(padded) {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(b - b'0')))
            .ok_or(MoneyError::TooLarge)?;
    }
    // Limit to what fits comfortably in every provider's 64-bit field.
    if minor > 1_000_000_000_000_000 {
        return Err(MoneyError::TooLarge);
    }
    Ok(minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_amounts_normalize_to_the_same_minor_units() {
        for s in ["10", "10.0", "10.00", "10.000"] {
            assert_eq!(Money::parse(s, "eur").unwrap().minor_units(), 1000, "{s}");
        }
        assert_eq!(
            Money::parse("10.5", "EUR").unwrap().to_decimal_string(),
            "10.50"
        );
        assert_eq!(Money::parse("500", "JPY").unwrap().minor_units(), 500);
        assert_eq!(Money::parse("1.234", "KWD").unwrap().minor_units(), 1234);
        assert_eq!(
            Money::parse("0.01", "USD").unwrap().to_decimal_string(),
            "0.01"
        );
    }

    #[test]
    fn rejects_what_would_lose_or_invent_cents() {
        assert!(matches!(
            Money::parse("10.001", "EUR"),
            Err(MoneyError::TooPrecise { .. })
        ));
        assert!(matches!(
            Money::parse("1.5", "JPY"),
            Err(MoneyError::TooPrecise { .. })
        ));
        assert_eq!(Money::parse("0.00", "EUR"), Err(MoneyError::NotPositive));
        for bad in [
            "-1.00", "+1.00", "1e3", " 1.00", "1.", ".5", "1,00", "", "0x10", "1.0.0",
        ] {
            assert_eq!(
                Money::parse(bad, "EUR"),
                Err(MoneyError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            Money::parse("99999999999999999999", "EUR"),
            Err(MoneyError::TooLarge)
        );
    }

    #[test]
    fn currencies_are_iso_4217() {
        assert_eq!(Money::parse("1", "XYZ"), Err(MoneyError::UnknownCurrency));
        assert_eq!(Money::parse("1", "EURO"), Err(MoneyError::UnknownCurrency));
        assert_eq!(Money::parse("1.00", "usd").unwrap().currency_code(), "USD");
    }
}
