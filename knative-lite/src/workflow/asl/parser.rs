//! The character scanner under both of the language's little grammars (JSONPath and the
//! intrinsic functions): each adds its own productions to [`Parser`] in its module.

pub(super) struct Parser<'t> {
    pub(super) text: &'t str,
    pub(super) pos: usize,
}

impl Parser<'_> {
    pub(super) fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    pub(super) fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    pub(super) fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// A number literal (`-12`, `1.5e3`); the token when it does not parse.
    pub(super) fn number(&mut self) -> Result<serde_json::Number, String> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || "+-.eE".contains(c))
        {
            self.bump();
        }
        let token = &self.text[start..self.pos];
        token.parse().map_err(|_| token.to_string())
    }

    pub(super) fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }
}
