//! The error of a SQL script that does not parse or plan: one line, with
//! the line and column in the script where the problem is.
//!
//! Nothing of a script runs until all of it plans, so every error here is
//! reported before a job starts; the CLI prints it as one line
//! (`error: line 3, column 12: unknown column 'x' in table 'clicks'`).

use std::fmt;

/// What is wrong with a SQL script.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlErrorKind {
    /// The text is not valid SQL (the parser's message).
    Syntax,
    /// A table or view that is not defined.
    UnknownTable,
    /// A column that is not in scope.
    UnknownColumn,
    /// Operands or a result of types that do not go together.
    TypeMismatch,
    /// Valid Flink SQL that floe does not run (yet).
    Unsupported,
    /// A table's `WITH` options are missing or wrong.
    InvalidOption,
    /// A statement that is valid but wrong in context (a table defined
    /// twice, an aggregate in `WHERE`).
    Invalid,
    /// An expression failed on a row while the job ran (a division by
    /// zero, a `CAST` that cannot convert, a `NULL` event time): the same
    /// rows fail the same way again, so the job fails without restarts.
    Evaluation,
}

/// A SQL script's error, at a line and column (1-based; 0 when the
/// position is not known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    /// Line in the script.
    pub line: u64,
    /// Column in the line.
    pub column: u64,
    /// What kind of problem.
    pub kind: SqlErrorKind,
    /// The message, one line.
    pub message: String,
}

impl SqlError {
    /// An error of `kind` at `span`'s start.
    pub fn new(kind: SqlErrorKind, at: sqlparser::tokenizer::Span, message: String) -> Self {
        SqlError {
            line: at.start.line,
            column: at.start.column,
            kind,
            message: message.replace('\n', " "),
        }
    }

    /// A parser or tokenizer error: its message without the position it
    /// ends with (` at Line: 3, Column: 12`), which becomes ours.
    pub fn syntax(e: sqlparser::parser::ParserError) -> Self {
        let text = match e {
            sqlparser::parser::ParserError::TokenizerError(m)
            | sqlparser::parser::ParserError::ParserError(m) => m,
            sqlparser::parser::ParserError::RecursionLimitExceeded => {
                "the statement is nested too deeply".to_string()
            }
        };
        let (message, line, column) = match text.rfind(" at Line: ") {
            Some(i) => {
                let pos = &text[i + " at Line: ".len()..];
                let (l, c) = pos.split_once(", Column: ").unwrap_or((pos, "0"));
                (
                    text[..i].to_string(),
                    l.trim().parse().unwrap_or(0),
                    c.trim().parse().unwrap_or(0),
                )
            }
            None => (text, 0, 0),
        };
        SqlError {
            line,
            column,
            kind: SqlErrorKind::Syntax,
            message: message.replace('\n', " "),
        }
    }
}

impl SqlError {
    /// The failure of an expression on a row (no position: it is the
    /// data's).
    pub fn evaluation(message: String) -> Self {
        SqlError {
            line: 0,
            column: 0,
            kind: SqlErrorKind::Evaluation,
            message: message.replace('\n', " "),
        }
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "line {}, column {}: {}",
                self.line, self.column, self.message
            )
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for SqlError {}

/// Builds an error of a kind at a span: `err!(UnknownColumn, span, "…{x}")`.
macro_rules! err {
    ($kind:ident, $span:expr, $($fmt:tt)*) => {
        $crate::sql::error::SqlError::new(
            $crate::sql::error::SqlErrorKind::$kind,
            $span,
            format!($($fmt)*),
        )
    };
}
pub(crate) use err;

/// The result of parsing and planning.
pub type SqlResult<T> = std::result::Result<T, SqlError>;
