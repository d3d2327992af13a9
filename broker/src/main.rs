fn main() {
    println!("moldau-broker {}", env!("CARGO_PKG_VERSION"));
}
