//! The bottom layer every command that talks to MySQL shares: connecting, named locks, reading
//! result rows without panicking, escaping and encoding values, identifiers, telling transient
//! errors from definite ones, and retrying. It knows nothing of logs, offsets or the relay.

pub mod bound;
mod connect;
pub mod encode;
pub mod error;
mod flavor;
pub mod ident;
pub mod lock;
pub mod retry;
pub(crate) mod rows;
mod url;
mod value;

pub(crate) use connect::opts;
pub use connect::{connect, create_database, current_database, pool, with_conn};
pub use error::DbError;
pub use flavor::{Flavor, flavor};
pub use ident::{Ident, IdentError};
pub use url::{MysqlSettings, MysqlUrl};
pub use value::{MAX_TEXT_BYTES, SqlValue};
