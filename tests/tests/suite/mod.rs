mod compaction_wires;
mod harness;
mod plan_cycle;
mod provider_settings;
mod tidy;
