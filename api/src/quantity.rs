//! Resource quantities (`100m`, `1Gi`, `1.5e3`), exactly as upstream's `resource.Quantity`
//! parses, rounds and prints them: one type for validation, the scheduler, the kubelet and
//! the printers, so they cannot disagree.

/// How a quantity was written, and so how it prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// A quantity as `mantissa × 10^scale`, and the format its suffix asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    mantissa: i128,
    scale: i32,
    format: Format,
}

impl Quantity {
    /// Upstream's `ParseQuantity`: values finer than a nano are rounded up.
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let (negative, rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, rest) = rest.split_at(int_end);
        let (frac_part, suffix) = match rest.strip_prefix('.') {
            Some(r) => {
                let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
                r.split_at(end)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let (format, base10_exp, binary_exp) = match suffix {
            "" => (Format::DecimalSI, 0, 0),
            "n" => (Format::DecimalSI, -9, 0),
            "u" => (Format::DecimalSI, -6, 0),
            "m" => (Format::DecimalSI, -3, 0),
            "k" => (Format::DecimalSI, 3, 0),
            "M" => (Format::DecimalSI, 6, 0),
            "G" => (Format::DecimalSI, 9, 0),
            "T" => (Format::DecimalSI, 12, 0),
            "P" => (Format::DecimalSI, 15, 0),
            "E" => (Format::DecimalSI, 18, 0),
            "Ki" => (Format::BinarySI, 0, 10),
            "Mi" => (Format::BinarySI, 0, 20),
            "Gi" => (Format::BinarySI, 0, 30),
            "Ti" => (Format::BinarySI, 0, 40),
            "Pi" => (Format::BinarySI, 0, 50),
            "Ei" => (Format::BinarySI, 0, 60),
            e if e.starts_with(['e', 'E']) => {
                let exp: i32 = e[1..].parse().ok()?;
                (Format::DecimalExponent, exp, 0)
            }
            _ => return None,
        };
        let digits = format!("{int_part}{frac_part}");
        let mut mantissa: i128 = digits.parse().ok()?;
        mantissa = mantissa.checked_mul(1i128.checked_shl(binary_exp)?)?;
        if negative {
            mantissa = -mantissa;
        }
        let scale = base10_exp.checked_sub(i32::try_from(frac_part.len()).ok()?)?;
        let parsed = Quantity {
            mantissa,
            scale,
            format,
        };
        Some(parsed.round_up_to_nano())
    }
    /// Upstream keeps nine decimal places, rounding the rest away from zero.
    fn round_up_to_nano(mut self) -> Quantity {
        while self.scale < -9 {
            let rem = self.mantissa % 10;
            self.mantissa /= 10;
            if rem > 0 {
                self.mantissa += 1;
            } else if rem < 0 {
                self.mantissa -= 1;
            }
            self.scale += 1;
        }
        self
    }

    /// The value as an integer, when it is one.
    fn as_integer(&self) -> Option<i128> {
        if self.scale >= 0 {
            self.mantissa
                .checked_mul(10i128.checked_pow(self.scale.unsigned_abs())?)
        } else {
            let div = 10i128.checked_pow(self.scale.unsigned_abs())?;
            (self.mantissa % div == 0).then_some(self.mantissa / div)
        }
    }

    /// Upstream's `String()`: the canonical form (`1024Mi` is `1Gi`, `1000` is `1k`, `0.5`
    /// is `500m`); `None` when it has no suffix to print with.
    pub fn canonical(&self) -> Option<String> {
        if self.mantissa == 0 {
            return Some("0".to_string());
        }
        let mut format = self.format;
        let mut integer = None;
        if format == Format::BinarySI {
            match self.as_integer() {
                Some(v) if !(-1024 < v && v < 1024) => integer = Some(v),
                // Small or fractional binary values print in decimal, without rounding.
                _ => format = Format::DecimalSI,
            }
        }
        if let Some(mut v) = integer {
            let mut exp = 0;
            while v.abs() >= 1024 && v % 1024 == 0 {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].get(exp)?;
            return Some(format!("{v}{suffix}"));
        }
        // Decimal: strip trailing zeros, then lower the exponent to a multiple of three.
        let mut m = self.mantissa;
        let mut exp = self.scale;
        while m.abs() >= 10 && m % 10 == 0 {
            m /= 10;
            exp += 1;
        }
        match exp.rem_euclid(3) {
            1 => {
                m = m.checked_mul(10)?;
                exp -= 1;
            }
            2 => {
                m = m.checked_mul(100)?;
                exp -= 2;
            }
            _ => {}
        }
        let suffix = if format == Format::DecimalExponent {
            if exp == 0 {
                String::new()
            } else {
                format!("e{exp}")
            }
        } else {
            match exp {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                0 => "",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                _ => return None,
            }
            .to_string()
        };
        Some(format!("{m}{suffix}"))
    }

    /// The value rounded up to an integer (upstream's `Value()`).
    pub fn value(&self) -> i128 {
        self.ceil_at(0)
    }

    /// The value in thousandths, rounded up (upstream's `MilliValue()`).
    pub fn milli_value(&self) -> i128 {
        self.ceil_at(3)
    }

    /// `ceil(value × 10^digits)`, saturating.
    fn ceil_at(&self, digits: i32) -> i128 {
        let scale = self.scale + digits;
        if scale >= 0 {
            return 10i128
                .checked_pow(scale.unsigned_abs())
                .and_then(|p| self.mantissa.checked_mul(p))
                .unwrap_or(if self.mantissa < 0 {
                    i128::MIN
                } else {
                    i128::MAX
                });
        }
        match 10i128.checked_pow(scale.unsigned_abs()) {
            Some(div) => -((-self.mantissa).div_euclid(div)),
            None => i128::from(self.mantissa > 0),
        }
    }

    /// The value as a float, for arithmetic that need not be exact (scores, ratios).
    pub fn as_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.scale)
    }

    pub fn is_positive(&self) -> bool {
        self.mantissa > 0
    }

    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Upstream's `Sub`: exact, printed as [`Quantity::add`] prints.
    pub fn sub(&self, other: &Quantity) -> Option<Quantity> {
        self.add(&Quantity {
            mantissa: other.mantissa.checked_neg()?,
            ..*other
        })
    }

    /// Upstream's `Add`: exact, printed in this quantity's format unless this one is zero.
    pub fn add(&self, other: &Quantity) -> Option<Quantity> {
        let scale = self.scale.min(other.scale);
        let at = |q: &Quantity| {
            q.mantissa
                .checked_mul(10i128.checked_pow((q.scale - scale).unsigned_abs())?)
        };
        Some(Quantity {
            mantissa: at(self)?.checked_add(at(other)?)?,
            scale,
            format: if self.mantissa == 0 {
                other.format
            } else {
                self.format
            },
        })
    }
}

/// The value of a quantity in base units (cores, bytes), or `None` when it does not parse.
pub fn parse(s: &str) -> Option<f64> {
    Quantity::parse(s).map(|q| q.as_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_keep_the_first_format() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let sum = |a: &str, b: &str| q(a).add(&q(b)).unwrap().canonical().unwrap();
        assert_eq!(sum("1Gi", "1Gi"), "2Gi");
        assert_eq!(sum("100m", "1"), "1100m");
        assert_eq!(sum("0", "512Mi"), "512Mi");
        assert_eq!(sum("1", "500m"), "1500m");
    }

    #[test]
    fn canonical_forms() {
        for (input, want) in [
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1000Mi", "1000Mi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1Ki", "1Ki"),
            ("512", "512"),
            ("1000", "1k"),
            ("1200", "1200"),
            ("12000", "12k"),
            ("100M", "100M"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("100m", "100m"),
            ("0.1Ki", "102400m"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("0", "0"),
            ("0Gi", "0"),
            ("0.0000000001", "1n"),
            ("-1500m", "-1500m"),
        ] {
            assert_eq!(
                Quantity::parse(input).unwrap().canonical().unwrap(),
                want,
                "{input}"
            );
        }
        for bad in ["garbage", "1Zi", "", "ten", "."] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn values_round_up_like_upstream() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("100m").milli_value(), 100);
        assert_eq!(q("100m").value(), 1);
        assert_eq!(q("0.1").milli_value(), 100);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("128Mi").value(), 128 * 1024 * 1024);
        assert_eq!(q("1G").value(), 1_000_000_000);
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("1E").value(), 1_000_000_000_000_000_000);
        assert_eq!(q("2.5Ki").value(), 2560);
        assert_eq!(q("1n").value(), 1);
        assert_eq!(q("1n").milli_value(), 1);
        assert_eq!(q("-1500m").value(), -1);
        assert_eq!(q("2").as_f64(), 2.0);
        assert!(q("1m").is_positive() && !q("0").is_positive() && q("-1").is_negative());
    }
}
