mod config_cli;
mod store_cli;
