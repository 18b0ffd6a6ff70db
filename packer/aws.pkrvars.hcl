# AMI build (make ami, on a machine with AWS credentials): the amazon-ebs source from
# Debian's official bookworm AMI. Override with make ami AMI_VARS='-var aws_region=...'.
aws_region           = "eu-west-1"
aws_instance_type    = "t3.medium"
aws_source_ami_name  = "debian-12-amd64-*"
aws_source_ami_owner = "136693071363"
