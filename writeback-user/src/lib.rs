pub mod ebpf_object;
