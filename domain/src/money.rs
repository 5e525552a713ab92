//! Money as integer minor units plus an ISO 4217 currency — never a float.
//!
//! The API takes amounts as plain decimal strings (`"10.00"`). Parsing
//! normalizes at the currency's exponent, so `"10.0"`, `"10.00"` and
//! `"10.000"` are the same EUR amount, while `"10.001"` is rejected as more
//! precise than the currency allows.
//!
//! What `parse` accepts is also written as regular expressions for the API
//! document ([`Money::amount_pattern`], [`Money::currency_pattern`]), made
//! from the same currency table and bounds, one pair per currency exponent.

use std::fmt;

use iso_currency::{Currency, IntoEnumIterator};

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
    /// The largest amount in minor units: what fits comfortably in every
    /// provider's 64-bit field.
    pub const MAX_MINOR_UNITS: i64 = 1_000_000_000_000_000;

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

/// The API document's view of what [`Money::parse`] accepts.
impl Money {
    /// The exponents of the currencies that can be charged, each once, ascending.
    pub fn exponents() -> Vec<u16> {
        let mut exponents: Vec<u16> = Currency::iter().filter_map(Currency::exponent).collect();
        exponents.sort_unstable();
        exponents.dedup();
        exponents
    }

    /// Codes of the chargeable currencies with `exponent` decimals, in any
    /// letter case (`EUR`, `eur`, `Eur`), as an anchored regular expression.
    pub fn currency_pattern(exponent: u16) -> String {
        let codes: Vec<String> = Currency::iter()
            .filter(|c| c.exponent() == Some(exponent))
            .map(|c| {
                c.code()
                    .chars()
                    .map(|l| format!("[{l}{}]", l.to_ascii_lowercase()))
                    .collect()
            })
            .collect();
        format!("^(?:{})$", codes.join("|"))
    }

    /// The amounts `parse` accepts in a currency with `exponent` decimals,
    /// as an anchored regular expression: digits with an optional fraction,
    /// leading zeros allowed, more than `exponent` decimals only as
    /// trailing zeros, greater than zero and at most
    /// [`Money::MAX_MINOR_UNITS`].
    pub fn amount_pattern(exponent: u16) -> String {
        let e = usize::from(exponent);
        // Whole units below MAX_MINOR_UNITS / 10^e have at most `digits`
        // significant digits; exactly that bound is allowed with a zero fraction.
        let digits = Money::MAX_MINOR_UNITS.to_string().len() - 1 - e;
        let bound = format!("1{}", "0".repeat(digits));
        let zero_fraction = r"(?:\.0+)?";
        if e == 0 {
            return format!(
                "^0*(?:[1-9][0-9]{{0,{}}}|{bound}){zero_fraction}$",
                digits - 1
            );
        }
        // Any fraction: up to `e` digits kept, then zeros only.
        let fraction = format!(r"(?:\.[0-9]{{1,{e}}}0*)?");
        // A fraction whose kept digits are not all zero, by the position of
        // its first non-zero digit.
        let nonzero_fraction = (0..e)
            .map(|zeros| {
                let rest = e - zeros - 1;
                let tail = if rest == 0 {
                    String::new()
                } else {
                    format!("[0-9]{{0,{rest}}}")
                };
                format!("{}[1-9]{tail}", "0".repeat(zeros))
            })
            .collect::<Vec<_>>()
            .join("|");
        format!(
            r"^(?:0*[1-9][0-9]{{0,{}}}{fraction}|0*{bound}{zero_fraction}|0+\.(?:{nonzero_fraction})0*)$",
            digits - 1
        )
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
    if minor > Money::MAX_MINOR_UNITS {
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

    /// A currency of each exponent, to parse against that exponent's patterns.
    fn currency_with(exponent: u16) -> &'static str {
        Currency::iter()
            .find(|c| c.exponent() == Some(exponent))
            .unwrap()
            .code()
    }

    #[test]
    fn the_documented_currency_patterns_accept_exactly_the_chargeable_codes() {
        let exponents = Money::exponents();
        assert_eq!(
            exponents,
            [0, 2, 3, 4],
            "the document has one branch per exponent"
        );
        let patterns: Vec<(u16, regex::Regex)> = exponents
            .iter()
            .map(|&e| (e, regex::Regex::new(&Money::currency_pattern(e)).unwrap()))
            .collect();
        let letters = || (b'A'..=b'Z').chain(b'a'..=b'z').map(char::from);
        for a in letters() {
            for b in letters() {
                for c in ['R', 'r', 'D', 'd', 'F', 'f', 'Y', 'y', 'U', 'u', 'X', 'q'] {
                    let code = format!("{a}{b}{c}");
                    let accepted = Money::parse("1", &code).ok().map(|m| {
                        Currency::from_code(m.currency_code())
                            .unwrap()
                            .exponent()
                            .unwrap()
                    });
                    let documented: Vec<u16> = patterns
                        .iter()
                        .filter(|(_, p)| p.is_match(&code))
                        .map(|(e, _)| *e)
                        .collect();
                    assert_eq!(
                        documented,
                        accepted.into_iter().collect::<Vec<_>>(),
                        "{code}"
                    );
                }
            }
        }
        for code in ["", "EU", "EURO", " EUR", "EUR ", "E1R", "XAU", "xau"] {
            assert!(patterns.iter().all(|(_, p)| !p.is_match(code)), "{code:?}");
            assert!(Money::parse("1", code).is_err(), "{code:?}");
        }
    }

    #[test]
    fn the_documented_amount_patterns_accept_exactly_what_parse_accepts() {
        let mut samples: Vec<String> = [
            "",
            "0",
            "00",
            "1",
            "01",
            "001",
            "10",
            "1.",
            ".5",
            "1.0",
            "1.5",
            "1.05",
            "1.50",
            "1.500",
            "1.505",
            "1.0005",
            "1.00050",
            "1.00005",
            "0.1",
            "0.01",
            "0.001",
            "0.0001",
            "0.00001",
            "0.0",
            "0.00",
            "0.0000000",
            "00.01",
            "-1",
            "+1",
            "1e3",
            " 1",
            "1 ",
            "1,00",
            "1.0.0",
            "0x10",
            "١",
            "1\n",
        ]
        .map(str::to_owned)
        .to_vec();
        // Around the upper bound, for every exponent.
        for digits in 12..=20 {
            for lead in ["9", "1", "10", "0"] {
                let whole = format!("{lead}{}", "0".repeat(digits - lead.len().min(digits)));
                let nines = "9".repeat(digits);
                for fraction in ["", ".0", ".00", ".01", ".9999", ".0001"] {
                    samples.push(format!("{whole}{fraction}"));
                    samples.push(format!("{nines}{fraction}"));
                }
            }
        }
        // Every string of up to five characters over the alphabet that matters.
        let alphabet = ['0', '1', '9', '.'];
        let mut layer = vec![String::new()];
        for _ in 0..5 {
            layer = layer
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            samples.extend(layer.iter().cloned());
        }
        for exponent in Money::exponents() {
            let pattern = regex::Regex::new(&Money::amount_pattern(exponent)).unwrap();
            let currency = currency_with(exponent);
            for amount in &samples {
                assert_eq!(
                    pattern.is_match(amount),
                    Money::parse(amount, currency).is_ok(),
                    "{amount:?} in {currency} against {pattern}"
                );
            }
        }
    }
}
