//! The migrations are embedded at build time (`sqlx::migrate!`); a new file
//! in either directory must rebuild this crate, which cargo does not know to
//! do by itself.
fn main() {
    println!("cargo:rerun-if-changed=../migrations/sqlite");
    println!("cargo:rerun-if-changed=../migrations/postgres");
}
