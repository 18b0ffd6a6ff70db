//! `cairn`: manage a Cairn cluster's peers and volumes by talking to a `cairnd`.

use std::io::IsTerminal;

fn main() {
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let code = cairn_cli::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
        &mut stdin.lock(),
        interactive,
    );
    std::process::exit(code);
}
