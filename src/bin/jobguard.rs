fn main() -> std::process::ExitCode {
    jobguard::cli::main()
}
