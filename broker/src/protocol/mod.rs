//! The Kafka wire protocol edge: framing, the table of API versions this
//! broker really implements, request dispatch, and response writing
//! (including zero-copy Fetch responses).
//!
//! Message bodies are decoded and encoded with the `kafka-protocol` crate,
//! except the Fetch response, whose record bytes go straight from segment
//! files to the socket (see [`fetch_encode`]).

pub mod connection;
pub mod fetch_encode;
pub mod frame;
pub mod in_flight;
pub mod limits;
pub mod principal;
pub mod versions;
